package dev.rgd.client.bench;

import dev.rgd.client.Answer;
import dev.rgd.client.ClientStats;
import dev.rgd.client.Json;
import dev.rgd.client.RgdClient;
import dev.rgd.client.Source;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * One JVM client process under closed-loop load, for bench/bench_java_client.py: {@code callers}
 * asks are always out (each caller asks again as soon as it is answered), the same asks as
 * bench/bench_batch.py's Python client load (tenant {@code bench}, 10 namespaces, 7 topics each,
 * 1..10 messages of 1 KiB). Runs {@code --warmup} seconds (the JIT's), then {@code --duration}
 * measured seconds, and prints one {@code BENCH_JSON} line: calls and latency of the measured
 * part, and {@code total_calls}, every decision the daemon made for this process (what its CPU
 * time is divided by).
 *
 * <pre>java -cp CLASSES dev.rgd.client.bench.ClientLoad --url http://127.0.0.1:PORT --duration 5
 *     [--warmup 2] [--callers 2000] [--window-us 500]</pre>
 */
public final class ClientLoad {
    private static final int BUCKETS = 200_000; // latency histogram: 1 µs buckets up to 200 ms, the rest in the last

    private final RgdClient client;
    private final long measureFrom;
    private final long deadline;
    private final CountDownLatch done;
    private final AtomicLong total = new AtomicLong();
    private final AtomicLong measured = new AtomicLong();
    private final AtomicLong denied = new AtomicLong();
    private final AtomicLong notDaemon = new AtomicLong();
    private final AtomicLongArray latencyMicros = new AtomicLongArray(BUCKETS);

    private ClientLoad(RgdClient client, long measureFrom, long deadline, int callers) {
        this.client = client;
        this.measureFrom = measureFrom;
        this.deadline = deadline;
        this.done = new CountDownLatch(callers);
    }

    /** Caller {@code i}: ask, and on the answer ask again, until the deadline. Answers the client
     * gives at once are looped over here rather than recursed into. */
    private void run(int i) {
        String ns = "bench/ns" + (i % 10);
        int msgs = 1 + i % 10;
        String topic = "persistent://" + ns + "/t" + (i % 7);
        while (true) {
            long t0 = System.nanoTime();
            if (t0 - deadline >= 0) {
                done.countDown();
                return;
            }
            CompletableFuture<Answer> f = client.acquire(ns, "publish", msgs, msgs * 1024L, topic);
            if (f.isDone()) {
                record(f.join(), t0);
                continue;
            }
            f.whenComplete((a, e) -> {
                if (e != null) {
                    System.err.println("acquire failed: " + e);
                    done.countDown();
                    return;
                }
                record(a, t0);
                run(i);
            });
            return;
        }
    }

    private void record(Answer a, long t0) {
        total.incrementAndGet();
        if (!a.allowed()) {
            denied.incrementAndGet();
        }
        if (a.source() != Source.DAEMON) {
            notDaemon.incrementAndGet();
        }
        if (t0 - measureFrom >= 0) {
            measured.incrementAndGet();
            long us = (System.nanoTime() - t0) / 1000;
            latencyMicros.incrementAndGet((int) Math.min(BUCKETS - 1, us));
        }
    }

    private double percentileMillis(double p) {
        long n = measured.get();
        long rank = (long) Math.ceil(p / 100 * n);
        long seen = 0;
        for (int us = 0; us < BUCKETS; us++) {
            seen += latencyMicros.get(us);
            if (seen >= rank && seen > 0) {
                return us / 1000.0;
            }
        }
        return 0.0;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new LinkedHashMap<>(Map.of("--warmup", "2", "--callers", "2000", "--window-us", "500"));
        for (int i = 0; i + 1 < args.length; i += 2) {
            opt.put(args[i], args[i + 1]);
        }
        String url = opt.get("--url");
        double duration = Double.parseDouble(opt.getOrDefault("--duration", "0"));
        double warmup = Double.parseDouble(opt.get("--warmup"));
        int callers = Integer.parseInt(opt.get("--callers"));
        long windowUs = Long.parseLong(opt.get("--window-us"));
        if (url == null || !url.startsWith("http://127.0.0.1:") || !(duration > 0 && duration <= 600)
                || !(warmup >= 0 && warmup <= 60) || callers < 1 || callers > 20_000) {
            System.err.println("usage: ClientLoad --url http://127.0.0.1:PORT --duration 0..600 [--warmup 0..60] "
                    + "[--callers 1..20000] [--window-us N]  (loopback only)");
            System.exit(2);
        }
        long start = System.nanoTime();
        long measureFrom = start + (long) (warmup * 1e9);
        long deadline = measureFrom + (long) (duration * 1e9);
        try (RgdClient client = RgdClient.builder(url).window(Duration.ofNanos(windowUs * 1000)).build()) {
            ClientLoad load = new ClientLoad(client, measureFrom, deadline, callers);
            for (int i = 0; i < callers; i++) {
                load.run(i);
            }
            if (!load.done.await((long) (warmup + duration + 60), TimeUnit.SECONDS)) {
                System.err.println("callers did not finish");
                System.exit(1);
            }
            ClientStats s = client.stats();
            double seconds = (deadline - measureFrom) / 1e9; // calls asked from measureFrom until the deadline
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("calls", load.measured.get());
            out.put("seconds", Math.round(seconds * 1000) / 1000.0);
            out.put("calls_per_s", Math.round(load.measured.get() / seconds * 10) / 10.0);
            out.put("total_calls", load.total.get());
            out.put("requests", s.requests());
            out.put("asks_per_request", s.requests() == 0 ? 0.0 : Math.round(10.0 * s.asks() / s.requests()) / 10.0);
            out.put("denied", load.denied.get());
            out.put("not_from_daemon", load.notDaemon.get());
            out.put("p50_ms", load.percentileMillis(50));
            out.put("p90_ms", load.percentileMillis(90));
            out.put("p99_ms", load.percentileMillis(99));
            out.put("p999_ms", load.percentileMillis(99.9));
            out.put("java", System.getProperty("java.version"));
            System.out.println("BENCH_JSON " + Json.write(out));
        }
    }
}
