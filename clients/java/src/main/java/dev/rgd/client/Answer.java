package dev.rgd.client;

import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * The answer to one ask.
 *
 * @param allowed whether the messages may pass now
 * @param retryAfterMillis when denied: how long until this ask may fit (0 when allowed);
 *     {@link #UNBOUNDED_MILLIS} when no wait will do (a zero rate: ask again after a config change)
 * @param remainingMessages tokens left in the group's message bucket after this ask; empty when
 *     unlimited or not known
 * @param remainingBytes the same for bytes
 * @param reason why denied: the daemon's reason ({@code message_rate}, {@code byte_rate},
 *     {@code debt}), {@code retry_after} or {@code unreachable}; empty when allowed
 * @param group the resource group that decided; empty when the namespace has none (unlimited)
 *     or the daemon did not decide
 * @param source who decided
 */
public record Answer(boolean allowed, long retryAfterMillis, OptionalLong remainingMessages,
        OptionalLong remainingBytes, Optional<String> reason, Optional<String> group, Source source) {

    /** The daemon's "not soon" wait for a zero rate (2^31 - 1 ms, about 24.8 days). */
    public static final long UNBOUNDED_MILLIS = Integer.MAX_VALUE;

    /** Checks the components are present (use the empty optionals for "none"). */
    public Answer {
        Objects.requireNonNull(remainingMessages, "remainingMessages");
        Objects.requireNonNull(remainingBytes, "remainingBytes");
        Objects.requireNonNull(reason, "reason");
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(source, "source");
        if (retryAfterMillis < 0) {
            throw new IllegalArgumentException("retryAfterMillis: " + retryAfterMillis + " is negative");
        }
    }

    static Answer allowedBy(Source source) {
        return new Answer(true, 0, OptionalLong.empty(), OptionalLong.empty(), Optional.empty(), Optional.empty(),
                source);
    }

    static Answer denied(long retryAfterMillis, String reason, Source source) {
        return new Answer(false, retryAfterMillis, OptionalLong.empty(), OptionalLong.empty(),
                Optional.ofNullable(reason), Optional.empty(), source);
    }

    /** Seconds (as the daemon and the local buckets compute them) in whole milliseconds, rounded up:
     * waiting that long is enough. Infinite or huge waits are {@link #UNBOUNDED_MILLIS}. */
    static long millisOf(double seconds) {
        if (!(seconds > 0)) {
            return 0;
        }
        double ms = Math.ceil(seconds * 1000.0);
        return ms >= UNBOUNDED_MILLIS ? UNBOUNDED_MILLIS : (long) ms;
    }
}
