-- wrk request script for bench/bench_acquire.py: POST the JSON body held in the
-- file named by $BENCH_BODY_FILE (a single ask or a batch; bench_acquire.py
-- writes it, so the body the sanity check sends is byte for byte the one wrk
-- sends), then print one machine-readable summary line from the done hook.
-- No request()/response() hooks: wrk then sends the same prebuilt request on
-- every connection at full speed.

local path = os.getenv("BENCH_BODY_FILE")
if path == nil or path == "" then
  error("BENCH_BODY_FILE is not set")
end
local fh = assert(io.open(path, "rb"))
wrk.body = fh:read("*a")
fh:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"errors_connect":%d,"errors_read":%d,"errors_write":%d,"errors_status":%d,"errors_timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
