package dev.rgd.client.conformance;

import dev.rgd.client.Answer;
import dev.rgd.client.Json;
import dev.rgd.client.OnUnreachable;
import dev.rgd.client.Quota;
import dev.rgd.client.RgdClient;
import dev.rgd.client.RgdRequestException;
import dev.rgd.client.RgdUnreachableException;
import dev.rgd.client.UsageRecorded;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;

/**
 * Runs clients/conformance/cases.json's cases with {@link RgdClient}, driven by the harness
 * (tests/support/conformance.py) over stdin and stdout, one JSON object a line: it reads
 * {@code {"case": CASE, "url": URL}}, may ask {@code {"control": "stop"|"start"}} and wait for
 * {@code {"ok": true}}, and reports {@code {"result": ...}}. It only runs and reports; the harness
 * judges. Exits at the end of its input.
 */
public final class ConformanceRunner {
    private final BufferedReader in;
    private final PrintStream out;

    private ConformanceRunner(BufferedReader in, PrintStream out) {
        this.in = in;
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err); // only protocol lines on stdout
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        ConformanceRunner runner = new ConformanceRunner(in, out);
        warmUp();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> msg = Json.parseObject(line);
            Map<String, Object> result = runner.runCase(map(msg.get("case")), (String) msg.get("url"));
            out.println(Json.write(Map.of("result", result)));
        }
    }

    /**
     * A throwaway client's asks against a closed port (answered by the OPEN policy), before the
     * first case: a cold JVM spends tens of milliseconds loading classes and linking call sites on
     * the first asks, which would make a case's window measure the JVM instead of the client.
     */
    private static void warmUp() {
        for (int round = 0; round < 3; round++) {
            try (RgdClient c = RgdClient.builder("http://127.0.0.1:9").window(Duration.ofMillis(5))
                    .timeout(Duration.ofSeconds(1)).onUnreachable(OnUnreachable.OPEN).build()) {
                List<CompletableFuture<Map<String, Object>>> futures = new ArrayList<>();
                for (int i = 0; i < 200; i++) {
                    futures.add(ask(c, Map.of("namespace", "warm/up", "messages", 1L)));
                }
                futures.forEach(CompletableFuture::join);
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return o == null ? Map.of() : (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> asks(Map<String, Object> step) {
        Object a = step.get("acquire");
        List<Map<String, Object>> one = a instanceof List ? (List<Map<String, Object>>) a : List.of(map(a));
        long count = ((Number) step.getOrDefault("count", 1L)).longValue();
        List<Map<String, Object>> all = new ArrayList<>();
        for (long i = 0; i < count; i++) {
            all.addAll(one);
        }
        return all;
    }

    private void control(String what) throws IOException {
        out.println(Json.write(Map.of("control", what)));
        String reply = in.readLine();
        if (reply == null || !Boolean.TRUE.equals(Json.parseObject(reply).get("ok"))) {
            throw new IOException("the harness did not confirm " + what + ": " + reply);
        }
    }

    private static RgdClient client(String url, Map<String, Object> o) {
        RgdClient.Builder b = RgdClient.builder(url);
        if (o.containsKey("window_ms")) {
            b.window(Duration.ofNanos(Math.round(num(o, "window_ms") * 1e6)));
        }
        if (o.containsKey("timeout_ms")) {
            b.timeout(Duration.ofMillis((long) num(o, "timeout_ms")));
        }
        if (o.containsKey("unreachable_backoff_ms")) {
            b.unreachableBackoff(Duration.ofMillis((long) num(o, "unreachable_backoff_ms")));
        }
        if (o.containsKey("max_hold_ms")) {
            b.maxHold(Duration.ofMillis((long) num(o, "max_hold_ms")));
        }
        if (o.containsKey("max_batch")) {
            b.maxBatch((int) num(o, "max_batch"));
        }
        if (o.containsKey("connections")) {
            b.connections((int) num(o, "connections"));
        }
        if (o.containsKey("max_inflight")) {
            b.maxInflight((int) num(o, "max_inflight"));
        }
        if (o.containsKey("on_unreachable")) {
            b.onUnreachable(OnUnreachable.valueOf(((String) o.get("on_unreachable")).toUpperCase()));
        }
        if (o.containsKey("fallback_rate")) {
            double[] r = rate(o.get("fallback_rate"));
            b.fallbackRate(r[0], r[1]);
        }
        if (o.get("fallback_rates") instanceof List<?> rates) {
            for (Object x : rates) {
                Map<String, Object> e = map(x);
                double[] r = rate(e.get("rate"));
                b.fallbackRate((String) e.get("namespace"), (String) e.get("kind"), r[0], r[1]);
            }
        }
        return b.build();
    }

    private static double num(Map<String, Object> o, String key) {
        return ((Number) o.get(key)).doubleValue();
    }

    private static double[] rate(Object pair) {
        List<?> p = (List<?>) pair;
        return new double[] {p.get(0) == null ? Double.POSITIVE_INFINITY : ((Number) p.get(0)).doubleValue(),
            p.get(1) == null ? Double.POSITIVE_INFINITY : ((Number) p.get(1)).doubleValue()};
    }

    private static String argument(IllegalArgumentException e) {
        String m = Objects.toString(e.getMessage(), "");
        int colon = m.indexOf(':');
        return colon < 0 ? m : m.substring(0, colon);
    }

    private static CompletableFuture<Map<String, Object>> ask(RgdClient c, Map<String, Object> a) {
        try {
            return c.acquire((String) a.get("namespace"), (String) a.getOrDefault("kind", "publish"),
                    ((Number) a.getOrDefault("messages", 1L)).longValue(),
                    ((Number) a.getOrDefault("bytes", 0L)).longValue(), (String) a.get("topic"))
                    .thenApply(ConformanceRunner::answer);
        } catch (IllegalArgumentException e) {
            return CompletableFuture.completedFuture(Map.of("error", argument(e)));
        }
    }

    private static Map<String, Object> answer(Answer r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("allowed", r.allowed());
        m.put("source", r.source().wireName());
        m.put("reason", r.reason().orElse(null));
        m.put("group", r.group().orElse(null));
        m.put("retry_after_ms", r.retryAfterMillis());
        m.put("remaining_messages", r.remainingMessages().isPresent() ? r.remainingMessages().getAsLong() : null);
        m.put("remaining_bytes", r.remainingBytes().isPresent() ? r.remainingBytes().getAsLong() : null);
        return m;
    }

    private static Map<String, Object> call(RgdClient c, Map<String, Object> step) {
        try {
            if (step.containsKey("usage")) {
                Map<String, Object> u = map(step.get("usage"));
                UsageRecorded got = c.usage((String) u.get("namespace"), (String) u.getOrDefault("kind", "dispatch"),
                        ((Number) u.getOrDefault("messages", 1L)).longValue(),
                        ((Number) u.getOrDefault("bytes", 0L)).longValue(), (String) u.get("topic")).join();
                return Map.of("usage", Map.of("recorded", got.recorded(), "ungrouped", got.ungrouped()));
            }
            Map<String, Object> q = map(step.get("quota"));
            return Map.of("quota", quota(c.quota((String) q.get("namespace"), (String) q.get("topic")).join()));
        } catch (IllegalArgumentException e) {
            return Map.of("error", argument(e));
        } catch (CompletionException e) {
            if (e.getCause() instanceof RgdUnreachableException) {
                return Map.of("error", "unreachable");
            }
            if (e.getCause() instanceof RgdRequestException) {
                return Map.of("error", "request");
            }
            throw e;
        }
    }

    private static Map<String, Object> quota(Quota q) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("namespace", q.namespace());
        m.put("group", q.group().orElse(null));
        m.put("unlimited", q.unlimited());
        q.kinds().forEach((kind, k) -> m.put(kind, Map.of("local", rates(k.local()), "cluster", rates(k.cluster()))));
        return m;
    }

    private static Map<String, Object> rates(Quota.Rates r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages_per_second", r.messagesPerSecond().isPresent() ? r.messagesPerSecond().getAsDouble() : null);
        m.put("bytes_per_second", r.bytesPerSecond().isPresent() ? r.bytesPerSecond().getAsDouble() : null);
        return m;
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> runCase(Map<String, Object> c, String url) throws Exception {
        List<Object> steps = new ArrayList<>();
        long requests;
        try (RgdClient client = client(url, map(c.get("client")))) {
            for (Object s : (List<Object>) c.get("steps")) {
                Map<String, Object> step = map(s);
                if (step.containsKey("sleep_ms")) {
                    Thread.sleep(((Number) step.get("sleep_ms")).longValue()); // the case's timeline
                    steps.add(Map.of());
                } else if (step.containsKey("daemon")) {
                    control((String) step.get("daemon"));
                    steps.add(Map.of());
                } else if (step.containsKey("usage") || step.containsKey("quota")) {
                    steps.add(call(client, step));
                } else if (step.containsKey("until")) {
                    Map<String, Object> until = map(step.get("until"));
                    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(
                            ((Number) step.get("within_ms")).longValue());
                    Map<String, Object> a;
                    while (true) {
                        a = ask(client, asks(step).get(0)).join();
                        final Map<String, Object> got = a;
                        boolean met = until.entrySet().stream().allMatch(e -> Objects.equals(got.get(e.getKey()),
                                e.getValue()));
                        if (met || System.nanoTime() > deadline) {
                            break;
                        }
                        Thread.sleep(((Number) step.get("interval_ms")).longValue());
                    }
                    steps.add(Map.of("answers", List.of(a)));
                } else if ("concurrent".equals(step.get("mode"))) {
                    List<Map<String, Object>> asks = asks(step);
                    List<CompletableFuture<Map<String, Object>>> futures = new ArrayList<>();
                    if (Boolean.TRUE.equals(step.get("first_alone"))) {
                        long sent = client.stats().requests();
                        futures.add(ask(client, asks.get(0)));
                        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                        while (client.stats().requests() <= sent && System.nanoTime() < deadline) {
                            Thread.onSpinWait();
                        }
                        asks = asks.subList(1, asks.size());
                    }
                    for (Map<String, Object> a : asks) {
                        futures.add(ask(client, a));
                    }
                    List<Object> answers = new ArrayList<>();
                    for (CompletableFuture<Map<String, Object>> f : futures) {
                        answers.add(f.join());
                    }
                    steps.add(Map.of("answers", answers));
                } else {
                    List<Object> answers = new ArrayList<>();
                    for (Map<String, Object> a : asks(step)) {
                        answers.add(ask(client, a).join());
                    }
                    steps.add(Map.of("answers", answers));
                }
            }
            requests = client.stats().requests();
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("case", c.get("name"));
        result.put("steps", steps);
        result.put("client_requests", requests);
        return result;
    }
}
