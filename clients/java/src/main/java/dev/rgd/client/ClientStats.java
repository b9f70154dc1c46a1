package dev.rgd.client;

/**
 * What a client did so far (a snapshot; the same counters as {@code rgd.client.ClientStats}).
 *
 * @param requests acquire HTTP requests sent
 * @param asks asks sent in them
 * @param retryAfterAnswers asks answered locally inside a Retry-After
 * @param fallbackAnswers asks answered by the on-unreachable policy
 * @param errors acquire requests that failed (connection, timeout, 5xx, not rgd's answer)
 */
public record ClientStats(long requests, long asks, long retryAfterAnswers, long fallbackAnswers, long errors) {
}
