package dev.rgd.client;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongSupplier;

/**
 * The client a JVM broker, proxy or producer asks rgd with: the Java twin of the Python
 * {@code rgd.client.Client}, with the same semantics (clients/conformance/cases.json holds
 * both to them).
 *
 * <p>Why batching: one HTTP request costs the daemon about as much CPU as deciding a few hundred
 * asks inside a batch, so a broker that asks once per message would be capped by HTTP, not by
 * rate limiting. {@link #acquire} looks like one ask, but concurrent calls within a short window
 * (0.5 ms by default) travel as one {@code {"requests": [...]}} POST, at most 1000 asks each, over
 * kept-alive HTTP/1.1 connections. With {@code maxInflight} (4) requests out, further asks wait
 * for the first answer instead of their window, so batches grow with the load rather than the
 * number of requests; a full batch goes at once while fewer than {@code connections} (8) are out.
 *
 * <p>When the daemon cannot answer (connection refused, timeout, 5xx, an answer that is not
 * rgd's): an explicit policy, never a hang or an exception per message. {@link OnUnreachable#CLOSED}
 * denies, except a bounded local fallback: each (namespace, kind) may pass up to its fallback rate
 * (messages/s, bytes/s) from a local token bucket of one second; {@link OnUnreachable#OPEN} admits
 * everything. No request is sent for {@code unreachableBackoff} after a failure. Answers say who
 * decided ({@link Answer#source()}).
 *
 * <p>Retry-After: a denied answer carries the daemon's wait; the client then answers that
 * (namespace, kind)'s asks of at least that size itself, denied, until the wait is over (at most
 * {@code maxHold}, 1 s: a config change may lift a zero rate's "24 days" sooner), instead of
 * asking again (a smaller ask may fit sooner, so it still goes to the daemon). Held asks never
 * reach the daemon, so its demand count misses them: {@code maxHold(Duration.ZERO)} sends every
 * ask. A non-2xx answer to the whole request with a {@code Retry-After} header pauses all sending
 * for that long (answers by the policy meanwhile).
 *
 * <p>Threads: share one client per daemon in a process; every method is thread-safe. Futures
 * complete on the client's HTTP threads (or at once, in the caller's thread, for answers the
 * client gives itself): do heavy work in {@code thenApplyAsync}.
 */
public final class RgdClient implements AutoCloseable {
    /** Asks per request, the daemon's limit. */
    public static final int MAX_BATCH = 1000;
    /** Messages per ask, the daemon's limit. */
    public static final long MAX_MESSAGES = 10_000_000L;
    /** Bytes per ask, the daemon's limit (1 TiB). */
    public static final long MAX_BYTES = 1L << 40;
    static final int MAX_NAME = 256;
    static final int MAX_TOPIC = 1024;
    static final List<String> KINDS = List.of("publish", "dispatch", "replication");
    /** The local fallback's bucket, in seconds of its rate (the Python client's FALLBACK_BURST_SECONDS). */
    static final double FALLBACK_BURST_SECONDS = 1.0;
    static final String REASON_UNREACHABLE = "unreachable";
    static final String REASON_RETRY_AFTER = "retry_after";

    /** A client for the daemon at {@code url} ({@code http://127.0.0.1:8080}); set options, then {@code build()}. */
    public static Builder builder(String url) {
        return new Builder(url);
    }

    /** Options, each with the Python client's default. */
    public static final class Builder {
        private final URI base;
        private long windowNanos = 500_000;
        private int maxBatch = MAX_BATCH;
        private Duration timeout = Duration.ofSeconds(2);
        private int connections = 8;
        private int maxInflight = 4;
        private OnUnreachable onUnreachable = OnUnreachable.CLOSED;
        private double[] fallbackRate = {0.0, Double.POSITIVE_INFINITY};
        private final Map<Key, double[]> fallbackRates = new HashMap<>();
        private long unreachableBackoffNanos = 500_000_000L;
        private long maxHoldNanos = 1_000_000_000L;
        private LongSupplier clock = System::nanoTime;

        private Builder(String url) {
            if (url == null || !(url.startsWith("http://") || url.startsWith("https://"))) {
                throw new IllegalArgumentException("url: expected http://HOST:PORT (java.net.http has no unix "
                        + "sockets: use the daemon's TCP listener), got " + url);
            }
            String trimmed = url.replaceAll("/+$", "");
            try {
                this.base = URI.create(trimmed);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("url: " + e.getMessage(), e);
            }
            if (base.getHost() == null) {
                throw new IllegalArgumentException("url: no host in " + url);
            }
        }

        /** How long an ask waits for others to share its request (0..1 s; default 500 µs). */
        public Builder window(Duration window) {
            long n = window.toNanos();
            if (n < 0 || n > 1_000_000_000L) {
                throw new IllegalArgumentException("window: " + window + " is out of range (0..1 s)");
            }
            this.windowNanos = n;
            return this;
        }

        /** Asks per request (1..1000; default 1000). */
        public Builder maxBatch(int maxBatch) {
            if (maxBatch < 1 || maxBatch > MAX_BATCH) {
                throw new IllegalArgumentException("maxBatch: " + maxBatch + " is out of range (1.." + MAX_BATCH + ")");
            }
            this.maxBatch = maxBatch;
            return this;
        }

        /** Whole-request timeout, connecting included (default 2 s). */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("timeout: " + timeout + " must be positive");
            }
            this.timeout = timeout;
            return this;
        }

        /** Requests out at once, full batches included (default 8). */
        public Builder connections(int connections) {
            if (connections < 1 || connections > 1000) {
                throw new IllegalArgumentException("connections: " + connections + " is out of range (1..1000)");
            }
            this.connections = connections;
            return this;
        }

        /** Requests out before asks wait for an answer instead of their window (1..connections; default 4). */
        public Builder maxInflight(int maxInflight) {
            this.maxInflight = maxInflight;
            return this;
        }

        /** What to answer when the daemon cannot (default CLOSED). */
        public Builder onUnreachable(OnUnreachable policy) {
            if (policy == null) {
                throw new IllegalArgumentException("onUnreachable: expected OPEN or CLOSED, got null");
            }
            this.onUnreachable = policy;
            return this;
        }

        /** CLOSED's local fallback for every (namespace, kind) without its own: messages/s and bytes/s
         * ({@code Double.POSITIVE_INFINITY} = unlimited; default 0 messages/s, unlimited bytes). */
        public Builder fallbackRate(double messagesPerSecond, double bytesPerSecond) {
            this.fallbackRate = rates(messagesPerSecond, bytesPerSecond);
            return this;
        }

        /** CLOSED's local fallback for one (namespace, kind). */
        public Builder fallbackRate(String namespace, String kind, double messagesPerSecond, double bytesPerSecond) {
            checkNamespace(namespace);
            checkKind(kind);
            fallbackRates.put(new Key(namespace, kind), rates(messagesPerSecond, bytesPerSecond));
            return this;
        }

        private static double[] rates(double messages, double bytes) {
            if (!(messages >= 0) || !(bytes >= 0)) {
                throw new IllegalArgumentException("fallbackRate: expected (messages/s, bytes/s) >= 0, got ("
                        + messages + ", " + bytes + ")");
            }
            return new double[] {messages, bytes};
        }

        /** No request for this long after one failed (default 0.5 s). */
        public Builder unreachableBackoff(Duration backoff) {
            if (backoff.isNegative()) {
                throw new IllegalArgumentException("unreachableBackoff: " + backoff + " is negative");
            }
            this.unreachableBackoffNanos = backoff.toNanos();
            return this;
        }

        /** The longest a Retry-After is held locally (default 1 s; 0 sends every ask). */
        public Builder maxHold(Duration maxHold) {
            if (maxHold.isNegative()) {
                throw new IllegalArgumentException("maxHold: " + maxHold + " is negative");
            }
            this.maxHoldNanos = maxHold.toNanos();
            return this;
        }

        /** The clock holds and fallback buckets read, in nanoseconds (default System::nanoTime; for tests). */
        Builder clock(LongSupplier nanos) {
            this.clock = nanos;
            return this;
        }

        /** The client (its threads start now); close it when done. */
        public RgdClient build() {
            if (maxInflight < 1 || maxInflight > connections) {
                throw new IllegalArgumentException("maxInflight: " + maxInflight + " is out of range (1..connections="
                        + connections + ")");
            }
            return new RgdClient(this);
        }
    }

    // -- state ---------------------------------------------------------------------------------

    private record Key(String namespace, String kind) {
    }

    private record Ask(String namespace, String kind, long messages, long bytes, String topic) {
    }

    private record Pending(Ask ask, CompletableFuture<Answer> future) {
    }

    private record Hold(long untilNanos, long messages, long bytes) {
    }

    private record Buckets(FallbackBucket messages, FallbackBucket bytes) {
    }

    /** A future and what completes it, applied outside the lock (callbacks run user code). */
    private record Completion(CompletableFuture<Answer> future, Answer answer, Throwable error) {
        void apply() {
            if (error != null) {
                future.completeExceptionally(error);
            } else {
                future.complete(answer);
            }
        }
    }

    private final URI acquireUri;
    private final URI usageUri;
    private final String quotaBase;
    private final long windowNanos;
    private final int maxBatch;
    private final Duration timeout;
    private final int connections;
    private final int maxInflight;
    private final OnUnreachable onUnreachable;
    private final double[] fallbackRate;
    private final Map<Key, double[]> fallbackRates;
    private final long unreachableBackoffNanos;
    private final long maxHoldNanos;
    private final LongSupplier clock;
    private final long epoch; // the clock's reading at start: bucket times are seconds since it

    private final ExecutorService httpExecutor;
    private final ScheduledExecutorService timers;
    private final HttpClient http;

    private final Object lock = new Object();
    private List<Pending> pending = new ArrayList<>();
    private ScheduledFuture<?> timer;
    private int inflight;
    private int unanswered; // requests whose asks are not all answered yet (what close waits for)
    private int answering; // threads handing out a request's answers now
    private final Map<Key, Hold> holds = new HashMap<>();
    private long pausedUntil; // no request before this (unreachable, or a request-level Retry-After)
    private boolean paused;
    private final Map<Key, Buckets> fallback = new HashMap<>();
    private boolean closed;
    private long requests;
    private long asksSent;
    private long retryAfterAnswers;
    private long fallbackAnswers;
    private long errors;

    private RgdClient(Builder b) {
        String base = b.base.toString();
        this.acquireUri = URI.create(base + "/v1/acquire");
        this.usageUri = URI.create(base + "/v1/usage");
        this.quotaBase = base + "/v1/quota?namespace=";
        this.windowNanos = b.windowNanos;
        this.maxBatch = b.maxBatch;
        this.timeout = b.timeout;
        this.connections = b.connections;
        this.maxInflight = b.maxInflight;
        this.onUnreachable = b.onUnreachable;
        this.fallbackRate = b.fallbackRate;
        this.fallbackRates = Map.copyOf(b.fallbackRates);
        this.unreachableBackoffNanos = b.unreachableBackoffNanos;
        this.maxHoldNanos = b.maxHoldNanos;
        this.clock = b.clock;
        this.epoch = clock.getAsLong();
        this.httpExecutor = Executors.newCachedThreadPool(daemonThreads("rgd-client-http"));
        this.timers = Executors.newSingleThreadScheduledExecutor(daemonThreads("rgd-client-window"));
        // HTTP/1.1 (no h2c upgrade attempt); the JDK keeps its connections alive and reuses them.
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(timeout)
                .executor(httpExecutor).build();
    }

    private static ThreadFactory daemonThreads(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    // -- asking --------------------------------------------------------------------------------

    /** {@link #acquire(String, String, long, long, String)} without a topic. */
    public CompletableFuture<Answer> acquire(String namespace, String kind, long messages, long bytes) {
        return acquire(namespace, kind, messages, bytes, null);
    }

    /**
     * May {@code messages} messages of {@code bytes} bytes pass now?
     *
     * @param namespace {@code tenant/namespace}
     * @param kind {@code publish}, {@code dispatch} or {@code replication}
     * @param messages 0..10,000,000
     * @param bytes 0..2^40
     * @param topic the full topic name, or null (a topic's own group attachment wins over its namespace's)
     * @return the answer; it never completes exceptionally for an unreachable daemon (the policy
     *     answers), only with {@link RgdRequestException} when the daemon refused the request as malformed
     * @throws IllegalArgumentException an argument is out of range (checked here, so one bad ask fails at
     *     its caller instead of failing the whole batch); the message starts with the argument's name
     * @throws IllegalStateException the client is closed
     */
    public CompletableFuture<Answer> acquire(String namespace, String kind, long messages, long bytes, String topic) {
        checkAsk(namespace, kind, messages, bytes, topic);
        List<List<Pending>> send = null;
        CompletableFuture<Answer> future;
        synchronized (lock) {
            if (closed) {
                throw new IllegalStateException("client is closed");
            }
            long now = clock.getAsLong();
            if (!holds.isEmpty()) {
                Key key = new Key(namespace, kind);
                Hold hold = holds.get(key);
                if (hold != null) {
                    if (now < hold.untilNanos && messages >= hold.messages && bytes >= hold.bytes) {
                        retryAfterAnswers++;
                        return CompletableFuture.completedFuture(Answer.denied(
                                Answer.millisOf((hold.untilNanos - now) / 1e9), REASON_RETRY_AFTER,
                                Source.RETRY_AFTER));
                    }
                    if (now >= hold.untilNanos) {
                        holds.remove(key);
                    }
                }
            }
            if (paused && now < pausedUntil) {
                return CompletableFuture.completedFuture(byPolicy(namespace, kind, messages, bytes, now));
            }
            future = new CompletableFuture<>();
            pending.add(new Pending(new Ask(namespace, kind, messages, bytes, topic), future));
            if (pending.size() >= maxBatch || windowNanos == 0) {
                send = takeBatches(false);
            } else if (timer == null) {
                timer = timers.schedule(this::windowOver, windowNanos, TimeUnit.NANOSECONDS);
            }
        }
        sendAll(send);
        return future;
    }

    private void windowOver() {
        List<List<Pending>> send;
        synchronized (lock) {
            timer = null;
            // While answers are being handed out, the asks their callers make at once join the
            // same batch: it goes when the handing out is over (see answered).
            send = answering > 0 ? null : takeBatches(false);
        }
        sendAll(send);
    }

    /**
     * The batches to send now (call with the lock held): full batches while fewer than
     * {@code connections} requests are out; the rest when their window is over (no timer) or
     * {@code force}, unless {@code maxInflight} requests are out (then the first answer to come
     * back sends them: under load batches grow to fill a round trip instead of multiplying small
     * requests, each of which costs both processes far more than an ask).
     */
    private List<List<Pending>> takeBatches(boolean force) {
        List<List<Pending>> out = null;
        while (!pending.isEmpty()) {
            boolean full = pending.size() >= maxBatch;
            // (with no window, asks never start a timer: they go as soon as maxInflight allows)
            boolean go = force || (full ? inflight < connections : timer == null && inflight < maxInflight);
            if (!go) {
                break;
            }
            List<Pending> batch;
            if (pending.size() <= maxBatch) {
                batch = pending;
                pending = new ArrayList<>();
            } else {
                batch = new ArrayList<>(pending.subList(0, maxBatch));
                pending = new ArrayList<>(pending.subList(maxBatch, pending.size()));
            }
            if (out == null) {
                out = new ArrayList<>(1);
            }
            out.add(batch);
            inflight++;
            unanswered++;
            requests++;
            asksSent += batch.size();
        }
        if (pending.isEmpty() && timer != null) {
            timer.cancel(false);
            timer = null;
        }
        return out;
    }

    private void sendAll(List<List<Pending>> batches) {
        if (batches != null) {
            for (List<Pending> batch : batches) {
                send(batch);
            }
        }
    }

    private void send(List<Pending> batch) {
        StringBuilder body = new StringBuilder(64 + batch.size() * 96).append("{\"requests\":[");
        for (int i = 0; i < batch.size(); i++) {
            if (i > 0) {
                body.append(',');
            }
            writeAsk(body, batch.get(i).ask);
        }
        body.append("]}");
        HttpRequest request = HttpRequest.newBuilder(acquireUri).timeout(timeout)
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body.toString(), StandardCharsets.UTF_8)).build();
        try {
            http.sendAsync(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8))
                    .whenComplete((response, error) -> answered(batch, response, error));
        } catch (RuntimeException e) { // e.g. the HTTP client's executor is gone
            answered(batch, null, e);
        }
    }

    private static void writeAsk(StringBuilder sb, Ask ask) {
        sb.append("{\"namespace\":");
        Json.writeString(sb, ask.namespace);
        sb.append(",\"kind\":\"").append(ask.kind).append("\",\"messages\":").append(ask.messages)
                .append(",\"bytes\":").append(ask.bytes);
        if (ask.topic != null) {
            sb.append(",\"topic\":");
            Json.writeString(sb, ask.topic);
        }
        sb.append('}');
    }

    private void answered(List<Pending> batch, HttpResponse<String> response, Throwable error) {
        List<Completion> done = new ArrayList<>(batch.size());
        List<List<Pending>> next;
        synchronized (lock) {
            try {
                decide(batch, response, error, done);
            } finally {
                inflight--;
                next = takeBatches(closed);
                answering++;
            }
        }
        sendAll(next);
        try {
            for (Completion c : done) {
                c.apply();
            }
        } finally {
            synchronized (lock) {
                unanswered--;
                answering--;
                // what the callers asked while being answered, once their window is over
                next = answering == 0 ? takeBatches(closed) : null;
                lock.notifyAll();
            }
            sendAll(next);
        }
    }

    /** What each ask of a finished request gets (lock held). */
    private void decide(List<Pending> batch, HttpResponse<String> response, Throwable error, List<Completion> done) {
        long now = clock.getAsLong();
        if (error != null) {
            unreachable(batch, unreachableBackoffNanos, now, done);
            return;
        }
        int status = response.statusCode();
        if (status == 200) {
            List<Map<String, Object>> results = results(response.body(), batch.size());
            if (results == null) { // not rgd's answer: treat as down
                unreachable(batch, unreachableBackoffNanos, now, done);
                return;
            }
            for (int i = 0; i < batch.size(); i++) {
                Pending p = batch.get(i);
                done.add(new Completion(p.future, fromDaemon(p.ask, results.get(i), now), null));
            }
            return;
        }
        Optional<String> retry = response.headers().firstValue("Retry-After");
        if (retry.isPresent() || status >= 500) {
            unreachable(batch, retry.map(h -> retryAfterNanos(h, unreachableBackoffNanos))
                    .orElse(unreachableBackoffNanos), now, done);
            return;
        }
        String text = response.body() == null ? "" : response.body();
        RgdRequestException e = new RgdRequestException(status, "rgd answered " + status + ": "
                + text.substring(0, Math.min(300, text.length())));
        for (Pending p : batch) {
            done.add(new Completion(p.future, null, e));
        }
    }

    /** The batch's results, each checked for the Decision shape; null when the body is not that. */
    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> results(String body, int expected) {
        try {
            Object results = Json.parseObject(body).get("results");
            if (!(results instanceof List<?> list) || list.size() != expected) {
                return null;
            }
            for (Object r : list) {
                if (!(r instanceof Map<?, ?> m) || !(m.get("allowed") instanceof Boolean)
                        || !nullOr(m.get("group"), String.class) || !nullOr(m.get("reason"), String.class)
                        || !nullOr(m.get("remaining_messages"), Long.class)
                        || !nullOr(m.get("remaining_bytes"), Long.class)
                        || !nullOr(m.get("retry_after_ms"), Long.class)) {
                    return null;
                }
            }
            return (List<Map<String, Object>>) list;
        } catch (Json.JsonException e) {
            return null;
        }
    }

    private static boolean nullOr(Object v, Class<?> type) {
        return v == null || type.isInstance(v);
    }

    private Answer fromDaemon(Ask ask, Map<String, Object> r, long now) {
        OptionalLong rm = optionalLong(r.get("remaining_messages"));
        OptionalLong rb = optionalLong(r.get("remaining_bytes"));
        Optional<String> group = Optional.ofNullable((String) r.get("group"));
        if ((Boolean) r.get("allowed")) {
            return new Answer(true, 0, rm, rb, Optional.empty(), group, Source.DAEMON);
        }
        Long waitMs = (Long) r.get("retry_after_ms");
        long wait = waitMs == null ? 0 : Math.max(0, waitMs);
        if (group.isPresent() && wait > 0 && maxHoldNanos > 0) {
            // the latest denial is held: an ask at least that big cannot fit before its wait is over
            long holdNanos = Math.min(wait * 1_000_000L, maxHoldNanos);
            holds.put(new Key(ask.namespace, ask.kind), new Hold(now + holdNanos, ask.messages, ask.bytes));
        }
        return new Answer(false, wait, rm, rb, Optional.ofNullable((String) r.get("reason")), group, Source.DAEMON);
    }

    private static OptionalLong optionalLong(Object v) {
        return v == null ? OptionalLong.empty() : OptionalLong.of((Long) v);
    }

    /** Retry-After in nanoseconds (the daemon sends whole seconds; an HTTP date counts as the default). */
    static long retryAfterNanos(String header, long defaultNanos) {
        try {
            double s = Double.parseDouble(header.trim());
            if (Double.isNaN(s)) {
                return defaultNanos;
            }
            return (long) Math.min(Math.max(0.0, s) * 1e9, Long.MAX_VALUE / 4.0);
        } catch (NumberFormatException e) {
            return defaultNanos;
        }
    }

    // -- the daemon is unreachable -------------------------------------------------------------

    private void unreachable(List<Pending> batch, long pauseNanos, long now, List<Completion> done) {
        errors++;
        long until = now + pauseNanos;
        if (!paused || until - pausedUntil > 0) {
            pausedUntil = until;
            paused = true;
        }
        for (Pending p : batch) {
            done.add(new Completion(p.future, byPolicy(p.ask.namespace, p.ask.kind, p.ask.messages, p.ask.bytes, now),
                    null));
        }
    }

    private Answer byPolicy(String namespace, String kind, long messages, long bytes, long now) {
        fallbackAnswers++;
        if (onUnreachable == OnUnreachable.OPEN) {
            return Answer.allowedBy(Source.FALLBACK);
        }
        double t = (now - epoch) / 1e9;
        Key key = new Key(namespace, kind);
        Buckets buckets = fallback.get(key);
        if (buckets == null) {
            double[] rate = fallbackRates.getOrDefault(key, fallbackRate);
            buckets = new Buckets(new FallbackBucket(rate[0], FALLBACK_BURST_SECONDS, t),
                    new FallbackBucket(rate[1], FALLBACK_BURST_SECONDS, t));
            fallback.put(key, buckets);
        }
        FallbackBucket mb = buckets.messages;
        FallbackBucket bb = buckets.bytes;
        mb.refill(t);
        bb.refill(t);
        double shortM = mb.shortfall(messages);
        double shortB = bb.shortfall(bytes);
        if (shortM == 0 && shortB == 0) {
            mb.take(messages);
            bb.take(bytes);
            return Answer.allowedBy(Source.FALLBACK);
        }
        double pausedFor = paused ? (pausedUntil - now) / 1e9 : 0.0;
        double wait = Math.max(Math.max(mb.waitSeconds(shortM), bb.waitSeconds(shortB)), pausedFor);
        return Answer.denied(Answer.millisOf(wait), REASON_UNREACHABLE, Source.FALLBACK);
    }

    // -- usage and quota -----------------------------------------------------------------------

    /** {@link #usage(String, String, long, long, String)} without a topic. */
    public CompletableFuture<UsageRecorded> usage(String namespace, String kind, long messages, long bytes) {
        return usage(namespace, kind, messages, bytes, null);
    }

    /**
     * Record usage that already happened (dispatch is charged after the fact, as Pulsar does): the
     * daemon never denies it, and later asks of the group pay the debt. One request per call.
     *
     * @return what the daemon recorded; completes exceptionally with {@link RgdUnreachableException}
     *     when the daemon cannot be reached, {@link RgdRequestException} when it refused the request
     * @throws IllegalArgumentException an argument is out of range (as for {@code acquire})
     */
    public CompletableFuture<UsageRecorded> usage(String namespace, String kind, long messages, long bytes,
            String topic) {
        checkAsk(namespace, kind, messages, bytes, topic);
        checkOpen();
        StringBuilder body = new StringBuilder();
        writeAsk(body, new Ask(namespace, kind, messages, bytes, topic));
        HttpRequest request = HttpRequest.newBuilder(usageUri).timeout(timeout)
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body.toString(), StandardCharsets.UTF_8)).build();
        return call(request, doc -> {
            if (!(doc.get("recorded") instanceof Long recorded) || !(doc.get("ungrouped") instanceof Long ungrouped)) {
                throw new Json.JsonException("usage: expected recorded and ungrouped (integers)");
            }
            return new UsageRecorded(recorded, ungrouped);
        });
    }

    /** {@link #quota(String, String)} without a topic. */
    public CompletableFuture<Quota> quota(String namespace) {
        return quota(namespace, null);
    }

    /**
     * The limits in force now for {@code namespace}'s group (or the topic's own, when it has one), for
     * a broker that enforces in-process.
     *
     * @return completes exceptionally as {@link #usage} does
     * @throws IllegalArgumentException {@code namespace} is not {@code tenant/namespace}
     */
    public CompletableFuture<Quota> quota(String namespace, String topic) {
        checkNamespace(namespace);
        checkTopic(topic);
        checkOpen();
        String uri = quotaBase + URLEncoder.encode(namespace, StandardCharsets.UTF_8)
                + (topic == null ? "" : "&topic=" + URLEncoder.encode(topic, StandardCharsets.UTF_8));
        HttpRequest request = HttpRequest.newBuilder(URI.create(uri)).timeout(timeout).GET().build();
        return call(request, Quota::fromJson);
    }

    private interface BodyReader<T> {
        T read(Map<String, Object> doc);
    }

    private <T> CompletableFuture<T> call(HttpRequest request, BodyReader<T> reader) {
        return http.sendAsync(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8))
                .handle((response, error) -> {
                    if (error != null) {
                        Throwable cause = error.getCause() != null && !(error instanceof IOException)
                                ? error.getCause() : error;
                        throw new RgdUnreachableException("rgd at " + request.uri() + " is unreachable: " + cause,
                                cause);
                    }
                    int status = response.statusCode();
                    String text = response.body() == null ? "" : response.body();
                    if (status >= 500 || (status != 200 && response.headers().firstValue("Retry-After").isPresent())) {
                        throw new RgdUnreachableException("rgd answered " + status, null);
                    }
                    if (status != 200) {
                        throw new RgdRequestException(status, "rgd answered " + status + ": "
                                + text.substring(0, Math.min(300, text.length())));
                    }
                    try {
                        return reader.read(Json.parseObject(text));
                    } catch (Json.JsonException e) {
                        throw new RgdUnreachableException("not rgd's answer from " + request.uri() + ": "
                                + e.getMessage(), e);
                    }
                });
    }

    // -- the rest ------------------------------------------------------------------------------

    /** What the client did so far. */
    public ClientStats stats() {
        synchronized (lock) {
            return new ClientStats(requests, asksSent, retryAfterAnswers, fallbackAnswers, errors);
        }
    }

    private void checkOpen() {
        synchronized (lock) {
            if (closed) {
                throw new IllegalStateException("client is closed");
            }
        }
    }

    /**
     * Send what is pending, wait for the answers (at most twice the timeout), stop the client's
     * threads. Further calls throw IllegalStateException; closing again does nothing.
     */
    @Override
    public void close() {
        List<List<Pending>> send;
        synchronized (lock) {
            if (closed) {
                return;
            }
            closed = true;
            send = takeBatches(true);
        }
        sendAll(send);
        long deadline = System.nanoTime() + 2 * timeout.toNanos();
        boolean interrupted = false;
        synchronized (lock) {
            while (unanswered > 0 || !pending.isEmpty()) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    break;
                }
                try {
                    lock.wait(Math.max(1, left / 1_000_000));
                } catch (InterruptedException e) {
                    interrupted = true;
                    break;
                }
            }
        }
        timers.shutdownNow();
        httpExecutor.shutdown();
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    // -- argument checks (the daemon's own bounds, rgd/api/requests.py) -----------------------

    private static void checkAsk(String namespace, String kind, long messages, long bytes, String topic) {
        checkNamespace(namespace);
        checkKind(kind);
        if (messages < 0 || messages > MAX_MESSAGES) {
            throw new IllegalArgumentException("messages: expected an integer 0.." + MAX_MESSAGES + ", got " + messages);
        }
        if (bytes < 0 || bytes > MAX_BYTES) {
            throw new IllegalArgumentException("bytes: expected an integer 0.." + MAX_BYTES + ", got " + bytes);
        }
        checkTopic(topic);
    }

    static void checkNamespace(String ns) {
        if (ns == null || ns.isEmpty() || ns.length() > MAX_NAME || ns.indexOf('/') != ns.lastIndexOf('/')
                || ns.indexOf('/') <= 0 || ns.endsWith("/")) {
            throw new IllegalArgumentException("namespace: expected 'tenant/namespace', got "
                    + (ns == null ? "null" : "'" + ns + "'"));
        }
    }

    static void checkKind(String kind) {
        if (kind == null || !KINDS.contains(kind)) {
            throw new IllegalArgumentException("kind: expected one of " + String.join(", ", KINDS) + ", got "
                    + (kind == null ? "null" : "'" + kind + "'"));
        }
    }

    private static void checkTopic(String topic) {
        if (topic != null && topic.length() > MAX_TOPIC) {
            throw new IllegalArgumentException("topic: expected a topic name of at most " + MAX_TOPIC + " characters");
        }
    }
}
