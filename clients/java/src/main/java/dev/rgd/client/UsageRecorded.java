package dev.rgd.client;

/**
 * The daemon's answer to {@link RgdClient#usage}: usage is recorded, never denied.
 *
 * @param recorded asks charged to a resource group
 * @param ungrouped asks whose namespace has no group (nothing to charge)
 */
public record UsageRecorded(long recorded, long ungrouped) {
}
