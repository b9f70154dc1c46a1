package dev.rgd.client;

/**
 * {@link RgdClient#usage} or {@link RgdClient#quota} could not reach the daemon (connection
 * refused, timeout, 5xx, an answer that is not rgd's). {@code acquire} never fails this way:
 * its on-unreachable policy answers instead.
 */
public final class RgdUnreachableException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    RgdUnreachableException(String message, Throwable cause) {
        super(message, cause);
    }
}
