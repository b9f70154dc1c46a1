package dev.rgd.client;

/**
 * The daemon refused a request as malformed (a 4xx other than 429): a bug on the client's
 * side. Every ask that travelled in that request completes exceptionally with it.
 */
public final class RgdRequestException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int status;

    RgdRequestException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** The HTTP status the daemon answered. */
    public int status() {
        return status;
    }
}
