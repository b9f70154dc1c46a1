package dev.rgd.client;

/** Who decided an {@link Answer}. */
public enum Source {
    /** The daemon decided. */
    DAEMON("daemon"),
    /** Denied by the client itself: inside the daemon's Retry-After for this (namespace, kind). */
    RETRY_AFTER("retry_after"),
    /** The daemon could not answer: the client's on-unreachable policy decided. */
    FALLBACK("fallback");

    private final String wireName;

    Source(String wireName) {
        this.wireName = wireName;
    }

    /** The name the Python client uses for the same source ({@code rgd.client.SOURCE_*}). */
    public String wireName() {
        return wireName;
    }
}
