package dev.rgd.client;

/** What the client answers when the daemon cannot (connection refused, timeout, 5xx). */
public enum OnUnreachable {
    /** Deny, except what each (namespace, kind)'s local fallback rate lets through. */
    CLOSED,
    /** Admit everything. */
    OPEN
}
