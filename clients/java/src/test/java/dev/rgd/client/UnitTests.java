package dev.rgd.client;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * The Java client's unit tests, without a test framework (the build is javac alone): each
 * test is a named method; {@code main} runs them all, prints {@code ok NAME} or {@code FAIL NAME:
 * why} per test and a last line {@code N passed, M failed}, and exits 1 on any failure.
 *
 * <p>Pure logic (JSON, the fallback bucket, argument checks) against literal values; the
 * client's answers to HTTP failures the daemon never produces (a 503 with Retry-After, a 400, a
 * body that is not rgd's) against a JDK {@code HttpServer} on loopback that answers them. What
 * the daemon does produce is checked against a real daemon by the conformance list.
 */
public final class UnitTests {
    private interface Test {
        void run() throws Exception;
    }

    private static final Map<String, Test> TESTS = new LinkedHashMap<>();

    static {
        TESTS.put("json_reads_the_api_shapes", UnitTests::jsonReadsTheApiShapes);
        TESTS.put("json_refuses_what_rfc8259_refuses", UnitTests::jsonRefuses);
        TESTS.put("json_writes_and_escapes", UnitTests::jsonWrites);
        TESTS.put("json_round_trips", UnitTests::jsonRoundTrips);
        TESTS.put("fallback_bucket_follows_the_token_bucket_rules", UnitTests::fallbackBucket);
        TESTS.put("arguments_are_checked_at_the_caller", UnitTests::argumentsChecked);
        TESTS.put("builder_refuses_bad_options", UnitTests::builderRefuses);
        TESTS.put("answer_millis_round_up_and_cap", UnitTests::answerMillis);
        TESTS.put("retry_after_header_pauses_all_sending", UnitTests::retryAfterHeaderPauses);
        TESTS.put("a_4xx_fails_the_asks_of_that_request", UnitTests::badRequestFails);
        TESTS.put("an_answer_that_is_not_rgds_counts_as_unreachable", UnitTests::notRgdsAnswer);
        TESTS.put("connections_are_kept_alive", UnitTests::keptAlive);
        TESTS.put("close_sends_what_is_pending_and_refuses_more", UnitTests::closeSendsPending);
    }

    public static void main(String[] args) {
        int passed = 0;
        int failed = 0;
        for (Map.Entry<String, Test> t : TESTS.entrySet()) {
            try {
                t.getValue().run();
                System.out.println("ok " + t.getKey());
                passed++;
            } catch (Throwable e) {
                System.out.println("FAIL " + t.getKey() + ": " + e);
                e.printStackTrace(System.out);
                failed++;
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    // -- assertions ----------------------------------------------------------------------------

    private static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    private static void equal(Object expected, Object got, String what) {
        if (expected == null ? got != null : !expected.equals(got)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + got);
        }
    }

    private static <T extends Throwable> T raises(Class<T> type, String messageStart, Test body) throws Exception {
        try {
            body.run();
        } catch (Throwable e) {
            if (type.isInstance(e) && (messageStart == null || String.valueOf(e.getMessage()).startsWith(messageStart))) {
                return type.cast(e);
            }
            throw new AssertionError("expected " + type.getSimpleName() + " starting '" + messageStart + "', got " + e,
                    e);
        }
        throw new AssertionError("expected " + type.getSimpleName() + " starting '" + messageStart + "', nothing thrown");
    }

    // -- JSON ----------------------------------------------------------------------------------

    private static void jsonReadsTheApiShapes() {
        Map<String, Object> doc = Json.parseObject(" {\"results\": [{\"allowed\": true, \"group\": \"g\", "
                + "\"remaining_messages\": 999998, \"remaining_bytes\": null}, {\"allowed\": false, \"group\": \"g\", "
                + "\"retry_after_ms\": 2147483647, \"reason\": \"message_rate\"}]}\n");
        List<?> results = (List<?>) doc.get("results");
        equal(2, results.size(), "results");
        Map<?, ?> first = (Map<?, ?>) results.get(0);
        equal(Boolean.TRUE, first.get("allowed"), "allowed");
        equal(999998L, first.get("remaining_messages"), "remaining_messages is a Long");
        check(first.containsKey("remaining_bytes") && first.get("remaining_bytes") == null, "null kept as a key");
        equal(2147483647L, ((Map<?, ?>) results.get(1)).get("retry_after_ms"), "retry_after_ms");
        equal(5.0, Json.parseObject("{\"messages_per_second\": 5.0}").get("messages_per_second"), "a float");
        equal(-1.5e-3, Json.parse("-1.5E-3"), "exponent");
        equal(0L, Json.parse("-0"), "minus zero is an integer");
        equal(Long.MAX_VALUE, Json.parse("9223372036854775807"), "the largest long");
        equal("a\"b\\c/d\b\f\n\r\t\u00e9\ud83d\ude00", Json.parse("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\""),
                "escapes");
        equal("\u00e9\ud83d\ude00", Json.parse("\"\u00e9\ud83d\ude00\""), "raw non-ASCII");
        equal(List.of(), Json.parse("[]"), "empty array");
        equal(Map.of(), Json.parse("{ }"), "empty object");
        List<String> keys = new ArrayList<>(Json.parseObject("{\"b\":1,\"a\":2,\"c\":3}").keySet());
        equal(List.of("b", "a", "c"), keys, "key order kept");
        equal(Boolean.FALSE, Json.parse("false"), "false");
        check(Json.parse("null") == null, "null");
    }

    private static void jsonRefuses() throws Exception {
        String deep = "[".repeat(Json.MAX_DEPTH + 1) + "]".repeat(Json.MAX_DEPTH + 1);
        String[][] bad = {
            {"", "unexpected end"}, {"   ", "unexpected end"}, {"{", "expected a string key"},
            {"{\"a\":1,}", "expected a string key"}, {"[1,]", "unexpected character ']'"}, {"[1 2]", "expected ','"},
            {"01", "leading zero"}, {"-", "a number needs digits"}, {"1.", "a fraction needs digits"},
            {".5", "unexpected character '.'"}, {"1e", "an exponent needs digits"}, {"+1", "unexpected character '+'"},
            {"NaN", "unexpected character 'N'"}, {"Infinity", "unexpected character 'I'"},
            {"'a'", "unexpected character '''"}, {"{a:1}", "expected a string key"}, {"\"a", "unterminated string"},
            {"\"a\tb\"", "unescaped control character"}, {"\"\\x\"", "invalid escape"}, {"\"\\u12G4\"", "invalid hex"}, {"\"\\u12\"", "truncated"},
            {"\"\\ud83d\"", "unpaired surrogate"}, {"\"\\ude00\"", "unpaired surrogate"},
            {"\"\\ud83d\\u0041\"", "unpaired surrogate"}, {"tru", "invalid literal"}, {"nul", "invalid literal"},
            {"{\"a\":1,\"a\":2}", "duplicate key"}, {"{} {}", "unexpected text after"}, {"1 // c", "unexpected text"},
            {"/* c */ 1", "unexpected character '/'"}, {"9223372036854775808", "integer out of range"},
            {"1e400", "number out of range"}, {deep, "nesting deeper than 64"}, {"\"\ud83d\"", "unpaired surrogate"},
            {"[1]", null},
        };
        for (String[] b : bad) {
            if (b[1] == null) {
                raises(Json.JsonException.class, "JSON: expected an object", () -> Json.parseObject(b[0]));
                continue;
            }
            Json.JsonException e = raises(Json.JsonException.class, "JSON: ", () -> Json.parse(b[0]));
            check(e.getMessage().contains(b[1]) && e.getMessage().contains("at offset"),
                    "'" + b[0] + "': expected '" + b[1] + "' with an offset, got: " + e.getMessage());
        }
        raises(Json.JsonException.class, "JSON: no input", () -> Json.parse(null));
        // exactly MAX_DEPTH levels is fine
        Json.parse("[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH));
    }

    private static void jsonWrites() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("namespace", "t/n\"s\\\n\u0001\u2028");
        m.put("messages", 3);
        m.put("bytes", 1099511627776L);
        m.put("rate", 5.0);
        m.put("small", 0.25);
        m.put("none", null);
        m.put("list", List.of(true, false));
        equal("{\"namespace\":\"t/n\\\"s\\\\\\n\\u0001\\u2028\",\"messages\":3,\"bytes\":1099511627776,"
                + "\"rate\":5.0,\"small\":0.25,\"none\":null,\"list\":[true,false]}", Json.write(m), "writer");
        raises(Json.JsonException.class, "JSON: NaN has no JSON form", () -> Json.write(Double.NaN));
        raises(Json.JsonException.class, "JSON: Infinity has no JSON form", () -> Json.write(Double.POSITIVE_INFINITY));
        raises(Json.JsonException.class, "JSON: cannot write a java.lang.Object", () -> Json.write(new Object()));
        raises(Json.JsonException.class, "JSON: object keys must be strings", () -> Json.write(Map.of(1, 2)));
        List<Object> cycle = new ArrayList<>();
        cycle.add(cycle);
        raises(Json.JsonException.class, "JSON: nesting deeper", () -> Json.write(cycle));
    }

    private static void jsonRoundTrips() {
        String[] docs = {
            "{\"a\":[1,-2,3.5,1.0E20,\"x\",null,true,{\"b\":{}}],\"\":\"\\u0000\"}",
            "[\"\\ud83d\\ude00\",\"tab\\there\",-9223372036854775808]",
        };
        for (String d : docs) {
            Object once = Json.parse(d);
            equal(once, Json.parse(Json.write(once)), "round trip of " + d);
        }
    }

    // -- the fallback bucket -------------------------------------------------------------------

    private static void fallbackBucket() {
        FallbackBucket b = new FallbackBucket(3, 1.0, 10.0); // 3/s, a bucket of 3, full at t=10
        equal(0.0, b.shortfall(3), "full: 3 fit");
        b.take(3);
        equal(1.0, b.shortfall(1), "empty: 1 missing");
        equal(1.0 / 3, b.waitSeconds(1.0), "1 token at 3/s");
        b.refill(10.5);
        equal(1.5, b.tokens(), "half a second refills 1.5");
        b.refill(20.0);
        equal(3.0, b.tokens(), "capped at the capacity");
        equal(0.0, b.shortfall(7), "a full bucket admits an oversize ask");
        b.take(7);
        equal(-4.0, b.tokens(), "into debt");
        equal(7.0, b.shortfall(7), "from a debt of 4, an oversize ask waits for a full bucket: 3 + 4");
        equal(7.0 / 3, b.waitSeconds(7.0), "7 tokens at 3/s");
        FallbackBucket zero = new FallbackBucket(0, 1.0, 0.0);
        equal(1.0, zero.shortfall(0), "a zero rate blocks even asks of 0");
        equal(Double.POSITIVE_INFINITY, zero.waitSeconds(1.0), "forever");
        FallbackBucket inf = new FallbackBucket(Double.POSITIVE_INFINITY, 1.0, 0.0);
        equal(0.0, inf.shortfall(1e12), "unlimited");
        equal(0.0, inf.waitSeconds(5), "no wait");
    }

    // -- arguments and options -----------------------------------------------------------------

    private static void argumentsChecked() throws Exception {
        try (RgdClient c = RgdClient.builder("http://127.0.0.1:9").build()) {
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire("no-slash", "publish", 1, 0));
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire("a/b/c", "publish", 1, 0));
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire("/a", "publish", 1, 0));
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire("a/", "publish", 1, 0));
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire(null, "publish", 1, 0));
            raises(IllegalArgumentException.class, "namespace:", () -> c.acquire("t/" + "n".repeat(255), "publish", 1, 0));
            raises(IllegalArgumentException.class, "kind:", () -> c.acquire("t/n", "replicate-all", 1, 0));
            raises(IllegalArgumentException.class, "kind:", () -> c.acquire("t/n", null, 1, 0));
            raises(IllegalArgumentException.class, "messages:", () -> c.acquire("t/n", "publish", -1, 0));
            raises(IllegalArgumentException.class, "messages:", () -> c.acquire("t/n", "publish", 10_000_001, 0));
            raises(IllegalArgumentException.class, "bytes:", () -> c.acquire("t/n", "publish", 1, (1L << 40) + 1));
            raises(IllegalArgumentException.class, "topic:", () -> c.acquire("t/n", "publish", 1, 0, "x".repeat(1025)));
            raises(IllegalArgumentException.class, "namespace:", () -> c.quota("nope"));
            raises(IllegalArgumentException.class, "messages:", () -> c.usage("t/n", "dispatch", -5, 0));
            equal(new ClientStats(0, 0, 0, 0, 0), c.stats(), "nothing was sent");
        }
    }

    private static void builderRefuses() throws Exception {
        raises(IllegalArgumentException.class, "url:", () -> RgdClient.builder("unix:/run/rgd.sock"));
        raises(IllegalArgumentException.class, "url:", () -> RgdClient.builder("127.0.0.1:8080"));
        raises(IllegalArgumentException.class, "window:", () -> RgdClient.builder("http://h:1").window(Duration.ofSeconds(2)));
        raises(IllegalArgumentException.class, "maxBatch:", () -> RgdClient.builder("http://h:1").maxBatch(1001));
        raises(IllegalArgumentException.class, "maxInflight:", () -> RgdClient.builder("http://h:1").maxInflight(9).build());
        raises(IllegalArgumentException.class, "fallbackRate:", () -> RgdClient.builder("http://h:1").fallbackRate(-1, 0));
        raises(IllegalArgumentException.class, "kind:",
                () -> RgdClient.builder("http://h:1").fallbackRate("t/n", "nope", 1, 1));
        raises(IllegalArgumentException.class, "timeout:", () -> RgdClient.builder("http://h:1").timeout(Duration.ZERO));
        RgdClient c = RgdClient.builder("http://127.0.0.1:9/").build();
        c.close();
        raises(IllegalStateException.class, "client is closed", () -> c.acquire("t/n", "publish", 1, 0));
        c.close(); // twice is fine
    }

    private static void answerMillis() {
        equal(0L, Answer.millisOf(0), "zero");
        equal(1L, Answer.millisOf(1e-9), "rounded up");
        equal(334L, Answer.millisOf(1.0 / 3), "a third of a second");
        equal(Answer.UNBOUNDED_MILLIS, Answer.millisOf(Double.POSITIVE_INFINITY), "forever");
        equal(Answer.UNBOUNDED_MILLIS, Answer.millisOf(1e12), "capped");
        equal(2_000_000_000L, RgdClient.retryAfterNanos("2", 5), "Retry-After: 2");
        equal(5L, RgdClient.retryAfterNanos("Wed, 21 Oct 2015 07:28:00 GMT", 5), "an HTTP date: the default");
    }

    // -- HTTP failures the daemon does not produce: a server that answers them ------------------

    /** A loopback server answering /v1/acquire with {@code reply}; counts requests and client ports. */
    private static final class Server implements AutoCloseable {
        final HttpServer http;
        final AtomicInteger requests = new AtomicInteger();
        final Set<Integer> clientPorts = ConcurrentHashMap.newKeySet();

        Server(Function<String, Object[]> reply) throws IOException {
            http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            http.createContext("/v1/acquire", (HttpExchange ex) -> {
                requests.incrementAndGet();
                clientPorts.add(ex.getRemoteAddress().getPort());
                String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                Object[] r = reply.apply(body); // {status, body, Retry-After or null}
                byte[] out = ((String) r[1]).getBytes(StandardCharsets.UTF_8);
                if (r[2] != null) {
                    ex.getResponseHeaders().add("Retry-After", (String) r[2]);
                }
                ex.getResponseHeaders().add("Content-Type", "application/json");
                ex.sendResponseHeaders((Integer) r[0], out.length);
                try (OutputStream os = ex.getResponseBody()) {
                    os.write(out);
                }
            });
            http.start();
        }

        String url() {
            return "http://127.0.0.1:" + http.getAddress().getPort();
        }

        @Override
        public void close() {
            http.stop(0);
        }
    }

    private static String allowedResults(String body) {
        int n = ((List<?>) Json.parseObject(body).get("requests")).size();
        return "{\"results\":[" + String.join(",", java.util.Collections.nCopies(n,
                "{\"allowed\":true,\"group\":\"g\",\"remaining_messages\":7,\"remaining_bytes\":null}")) + "]}";
    }

    private static void retryAfterHeaderPauses() throws Exception {
        AtomicInteger calls = new AtomicInteger();
        try (Server s = new Server(body -> calls.incrementAndGet() == 1
                ? new Object[] {503, "{\"error\":\"busy\"}", "1"} : new Object[] {200, allowedResults(body), null});
             RgdClient c = RgdClient.builder(s.url()).window(Duration.ZERO).fallbackRate(2, Double.POSITIVE_INFINITY)
                     .build()) {
            long t0 = System.nanoTime();
            Answer first = c.acquire("t/n", "publish", 1, 0).join();
            equal(Source.FALLBACK, first.source(), "a 503 is answered by the policy");
            check(first.allowed(), "within the fallback rate");
            Answer second = c.acquire("t/n", "publish", 1, 0).join();
            Answer third = c.acquire("t/n", "publish", 1, 0).join();
            equal(List.of(true, false), List.of(second.allowed(), third.allowed()), "2 msg/s, a bucket of 2");
            check(third.retryAfterMillis() > 0 && third.retryAfterMillis() <= 1000, "retry " + third.retryAfterMillis());
            equal(1, s.requests.get(), "paused: no request inside the Retry-After");
            Answer back;
            do {
                back = c.acquire("t/n", "publish", 1, 0).join();
                Thread.sleep(20);
            } while (back.source() != Source.DAEMON && System.nanoTime() - t0 < 5_000_000_000L);
            equal(Source.DAEMON, back.source(), "back to the daemon after the pause");
            check(System.nanoTime() - t0 >= 950_000_000L, "not before the Retry-After of 1 s");
            equal(7L, back.remainingMessages().getAsLong(), "remaining_messages");
            equal("g", back.group().orElse(null), "group");
            equal(1L, c.stats().errors(), "one failed request");
        }
    }

    private static void badRequestFails() throws Exception {
        try (Server s = new Server(body -> new Object[] {400, "{\"error\":\"requests[0].namespace: bad\"}", null});
             RgdClient c = RgdClient.builder(s.url()).window(Duration.ofMillis(20)).build()) {
            CompletableFuture<Answer> a = c.acquire("t/a", "publish", 1, 0);
            CompletableFuture<Answer> b = c.acquire("t/b", "publish", 1, 0);
            for (CompletableFuture<Answer> f : List.of(a, b)) {
                CompletionException e = raises(CompletionException.class, null, f::join);
                check(e.getCause() instanceof RgdRequestException r && r.status() == 400
                        && r.getMessage().contains("requests[0].namespace"), "cause: " + e.getCause());
            }
            equal(1, s.requests.get(), "one request for both");
        }
    }

    private static void notRgdsAnswer() throws Exception {
        String[] bodies = {"<html>", "{\"results\":[]}", "{\"results\":[{\"allowed\":\"yes\"}]}",
            "{\"results\":[{\"allowed\":true,\"remaining_messages\":1.5}]}", "{\"results\":[{\"allowed\":true}],}"};
        for (String reply : bodies) {
            try (Server s = new Server(body -> new Object[] {200, reply, null});
                 RgdClient c = RgdClient.builder(s.url()).window(Duration.ZERO).onUnreachable(OnUnreachable.OPEN).build()) {
                Answer a = c.acquire("t/n", "publish", 1, 0).join();
                check(a.allowed() && a.source() == Source.FALLBACK, reply + ": " + a);
                equal(1L, c.stats().errors(), reply + ": counted as an error");
            }
        }
    }

    private static void keptAlive() throws Exception {
        try (Server s = new Server(body -> new Object[] {200, allowedResults(body), null});
             RgdClient c = RgdClient.builder(s.url()).window(Duration.ZERO).build()) {
            for (int i = 0; i < 30; i++) {
                check(c.acquire("t/n", "publish", 1, 0).join().allowed(), "allowed");
            }
            equal(30, s.requests.get(), "30 requests");
            equal(1, s.clientPorts.size(), "one connection for 30 sequential requests");
        }
    }

    private static void closeSendsPending() throws Exception {
        AtomicLong asks = new AtomicLong();
        try (Server s = new Server(body -> {
            String r = allowedResults(body);
            asks.addAndGet(((List<?>) Json.parseObject(body).get("requests")).size());
            return new Object[] {200, r, null};
        })) {
            RgdClient c = RgdClient.builder(s.url()).window(Duration.ofMillis(900)).build();
            List<CompletableFuture<Answer>> fs = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                fs.add(c.acquire("t/n", "publish", 1, 0));
            }
            long t0 = System.nanoTime();
            c.close();
            check(System.nanoTime() - t0 < 800_000_000L, "close did not wait for the window");
            for (CompletableFuture<Answer> f : fs) {
                check(f.isDone() && f.join().allowed(), "answered before close returned");
            }
            equal(10L, asks.get(), "all 10 sent");
            raises(IllegalStateException.class, "client is closed", () -> c.quota("t/n"));
        }
    }
}
