package dev.rgd.client;

/**
 * The token bucket of the local fallback (one per namespace and kind, for messages and one for
 * bytes): the same rules as the daemon's {@code rgd.limiting.token_bucket.TokenBucket} for what
 * the fallback uses (start full, refill at the rate up to the capacity, a full bucket admits an
 * oversize ask, a zero rate blocks everything). Pure: time is passed in, in seconds.
 */
final class FallbackBucket {
    private final double rate; // per second; +Infinity = unlimited
    private final double capacity;
    private double tokens;
    private double updated;

    FallbackBucket(double rate, double burstSeconds, double now) {
        this.rate = rate;
        this.capacity = Double.isInfinite(rate) ? Double.POSITIVE_INFINITY : rate * burstSeconds;
        this.tokens = capacity;
        this.updated = now;
    }

    void refill(double now) {
        if (Double.isInfinite(rate)) {
            return;
        }
        double elapsed = now - updated;
        if (elapsed > 0) {
            tokens = Math.min(capacity, tokens + elapsed * rate);
            updated = now;
        }
    }

    /** Tokens missing for taking {@code n} now (0 when it may); call {@link #refill} first. */
    double shortfall(double n) {
        if (Double.isInfinite(rate) || (n <= tokens && rate > 0)) {
            return 0.0;
        }
        if (rate <= 0) {
            return Math.max(n, 1.0); // a zero rate blocks everything, even asks of 0
        }
        if (tokens >= capacity) {
            return 0.0; // full-bucket rule: an oversize ask passes into debt
        }
        return Math.min(n, capacity) - tokens; // an oversize ask waits for a full bucket
    }

    /** Seconds until {@code shortfall} tokens are back; +Infinity at a zero rate. */
    double waitSeconds(double shortfall) {
        if (shortfall <= 0 || Double.isInfinite(rate)) {
            return 0.0;
        }
        if (rate <= 0) {
            return Double.POSITIVE_INFINITY;
        }
        return shortfall / rate;
    }

    /** Remove {@code n} tokens (after {@link #shortfall} said 0). */
    void take(double n) {
        if (!Double.isInfinite(rate)) {
            tokens -= n;
        }
    }

    double tokens() {
        return tokens;
    }
}
