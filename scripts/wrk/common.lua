-- Shared by the measurement scripts: per-thread ids and status counts, reported by done().
local threads = {}
local next_id = 0

-- Runs in the main state: number the threads (`id` becomes a global of each thread).
function setup(thread)
   thread:set("id", next_id)
   table.insert(threads, thread)
   next_id = next_id + 1
end

function init(args)
   statuses = {}
   prefix = (args[1] or "run") .. "-" .. id
end

function count(status)
   statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
   local totals = {}
   for _, thread in ipairs(threads) do
      local counted = thread:get("statuses")
      for status, n in pairs(counted) do
         totals[status] = (totals[status] or 0) + n
      end
   end
   local seconds = summary.duration / 1e6
   for status, n in pairs(totals) do
      io.write(string.format("status %d: %d (%.0f/s)\n", status, n, n / seconds))
   end
   io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
      latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
