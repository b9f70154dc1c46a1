package dev.rgd.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalDouble;

/**
 * {@code GET /v1/quota}: the limits in force now for a namespace's group, for a broker that
 * enforces in-process.
 *
 * @param namespace the namespace asked about
 * @param group its resource group; empty when it has none
 * @param unlimited true when it has no group (then {@code kinds} is empty)
 * @param kinds per kind ({@code publish}, {@code dispatch}, {@code replication}): this daemon's
 *     local limit and the group's cluster-wide quota
 */
public record Quota(String namespace, Optional<String> group, boolean unlimited, Map<String, KindQuota> kinds) {

    /** Checks the components are present; keeps an unmodifiable copy of {@code kinds}. */
    public Quota {
        Objects.requireNonNull(namespace, "namespace");
        Objects.requireNonNull(group, "group");
        kinds = Collections.unmodifiableMap(new LinkedHashMap<>(kinds));
    }

    /** One kind's limits, if the daemon sent them. */
    public Optional<KindQuota> kind(String kind) {
        return Optional.ofNullable(kinds.get(kind));
    }

    /** One kind's limits: the local one in force on this daemon, and the group's cluster-wide quota. */
    public record KindQuota(Rates local, Rates cluster) {
    }

    /** Rates per second; empty = unlimited. */
    public record Rates(OptionalDouble messagesPerSecond, OptionalDouble bytesPerSecond) {
    }

    /** From the daemon's JSON body; unknown fields are ignored (a newer daemon may add some). */
    static Quota fromJson(Map<String, Object> doc) {
        Object ns = doc.get("namespace");
        Object group = doc.get("group");
        Object unlimited = doc.get("unlimited");
        if (!(ns instanceof String) || (group != null && !(group instanceof String))
                || !(unlimited instanceof Boolean)) {
            throw new Json.JsonException("quota: expected namespace (string), group (string or null) and "
                    + "unlimited (boolean), got " + Json.write(doc));
        }
        Map<String, KindQuota> kinds = new LinkedHashMap<>();
        for (String kind : RgdClient.KINDS) {
            Object k = doc.get(kind);
            if (k != null) {
                kinds.put(kind, new KindQuota(rates(k, kind, "local"), rates(k, kind, "cluster")));
            }
        }
        return new Quota((String) ns, Optional.ofNullable((String) group), (Boolean) unlimited, kinds);
    }

    private static Rates rates(Object kindDoc, String kind, String which) {
        Object r = kindDoc instanceof Map<?, ?> m ? m.get(which) : null;
        if (!(r instanceof Map<?, ?> rates)) {
            throw new Json.JsonException("quota: " + kind + "." + which + ": expected an object");
        }
        return new Rates(rate(rates.get("messages_per_second"), kind, which),
                rate(rates.get("bytes_per_second"), kind, which));
    }

    private static OptionalDouble rate(Object v, String kind, String which) {
        if (v == null) {
            return OptionalDouble.empty();
        }
        if (!(v instanceof Number n)) {
            throw new Json.JsonException("quota: " + kind + "." + which + ": expected a number or null, got " + v);
        }
        return OptionalDouble.of(n.doubleValue());
    }
}
