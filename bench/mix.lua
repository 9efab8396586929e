-- wrk's side of the load benchmark (bench/load.py runs it; see there). Configured by environment:
--   BENCH_DATA   a Lua file returning {users = {{id, token}, ...}, partners = {token, ...},
--                products = <count>, categories = {...}}: who the virtual clients are
--   BENCH_MIX    "mix": list products with a filter and a sort 40 %, get a product 30 %, list my
--                orders 15 %, place an order 10 %, patch a product 5 %; "mix_v3": the same mix as
--                a version 3 client sends it (/v3 paths, its defaults: no count, money as an
--                object); or one operation alone: "list", "get", "orders", "create", "patch",
--                each in v3 as "list_v3" (the same list, uncounted), "get_v3", ...; or
--                "conditional": the list revalidated with If-None-Match (BENCH_REVALIDATIONS)
--   BENCH_REVALIDATIONS  for "conditional": a Lua file returning {{token, path, etag}, ...}, each
--                a list page a client already holds (load.py fetched them), sent with its ETag
--   BENCH_RATE   requests/s per wrk thread, sent on a fixed schedule (wrk2's constant rate);
--                unset or 0: as fast as the server answers
--   BENCH_ADDRS  host:port,host:port: the servers, one per thread in turn (round-robin);
--                unset: the URL's
-- It prints "BENCH <key> <value>" lines for load.py: the totals, latency percentiles, every
-- status seen and one body of each error status. At a constant rate it also times each answer
-- from the moment its request was due on the schedule, not from when it was sent (a request
-- kept waiting by a busy connection counts its wait: wrk2's correction), for every answer, the
-- 2xx alone and the 503s alone. The due time travels in X-Request-ID, which the server echoes.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local timespec = ffi.new("bench_timespec")

local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, timespec)
  return tonumber(timespec.tv_sec) * 1000 + tonumber(timespec.tv_nsec) / 1e6
end

-- The main state: one server per thread in turn, and the threads, to read their counts at the end.
local threads = {}

function setup(thread)
  local addrs = os.getenv("BENCH_ADDRS")
  if addrs and addrs ~= "" then
    local targets = {}
    for host, port in addrs:gmatch("([^,:]+):(%d+)") do
      targets[#targets + 1] = wrk.lookup(host, port)[1]
    end
    thread.addr = targets[(#threads % #targets) + 1]
  end
  thread:set("thread_number", #threads + 1)
  threads[#threads + 1] = thread
end

-- Each thread's state.
local data, mix
statuses, error_bodies = {}, {}

local revalidations

function init(args)
  data = dofile(os.getenv("BENCH_DATA"))
  mix = os.getenv("BENCH_MIX") or "mix"
  if mix == "conditional" then
    revalidations = dofile(os.getenv("BENCH_REVALIDATIONS"))
  end
  math.randomseed(thread_number * 7919 + os.time())
end

-- Constant rate: each request takes the next slot of the thread's schedule, whichever connection
-- is free; behind schedule (the server saturated), it goes at once. Defined only when a rate is
-- asked for: wrk sends at once when the script has no delay().
local rate = tonumber(os.getenv("BENCH_RATE") or "0")
-- The due times of the requests delayed and not yet made, in order: wrk makes each request when
-- its delay is over, and the delays end in the order they were given.
local due, first_due, next_due = {}, 1, 1
if rate > 0 then
  local interval_ms, next_at = 1000 / rate, nil
  function delay()
    local now = now_ms()
    next_at = (next_at or now) + interval_ms
    due[next_due], next_due = next_at, next_due + 1
    return math.max(0, next_at - now)
  end
end

-- The request's due time (now, without a schedule), in X-Request-ID.
local function stamped(request_text)
  local at = now_ms()
  if first_due < next_due then
    at, due[first_due], first_due = due[first_due], nil, first_due + 1
  end
  local id = string.format("X-Request-ID: bench-%.3f\r\n", at)
  return (request_text:gsub("\r\n", "\r\n" .. id, 1))
end

local JSON = {["Content-Type"] = "application/json"}
local MERGE_PATCH = {["Content-Type"] = "application/merge-patch+json"}

local function bearer(token, headers)
  local all = {Authorization = "Bearer " .. token}
  for name, value in pairs(headers or {}) do
    all[name] = value
  end
  return all
end

local function any(list)
  return list[math.random(#list)]
end

local function list_products(user)
  local path = "/v1/products?category=" .. any(data.categories) .. "&sort=-price_cents&per_page=20"
  return wrk.format("GET", path, bearer(user[2]))
end

-- v3's list of the same page: uncounted (no `Prefer: count=`), where v1's counts it exactly.
local function list_products_v3(user)
  local path = "/v3/products?category=" .. any(data.categories) .. "&sort=-price.amount&per_page=20"
  return wrk.format("GET", path, bearer(user[2]))
end

-- Each operation of the mix, in version 1 and as a version 3 client sends it: v3's paths, its
-- defaults (no count unless asked) and its money, an object with a decimal amount (spec/v3.yaml).
local requests = {
  list = list_products,
  list_v3 = list_products_v3,
  get = function(user)
    return wrk.format("GET", "/v1/products/" .. math.random(data.products), bearer(user[2]))
  end,
  get_v3 = function(user)
    return wrk.format("GET", "/v3/products/" .. math.random(data.products), bearer(user[2]))
  end,
  orders = function(user)
    return wrk.format("GET", "/v1/orders?sort=-created_at&per_page=20", bearer(user[2]))
  end,
  orders_v3 = function(user)
    return wrk.format("GET", "/v3/orders?sort=-created_at&per_page=20", bearer(user[2]))
  end,
  create = function(user)
    local body = string.format(
      '{"user_id":%d,"items":[{"product_id":%d,"quantity":1}]}', user[1], math.random(data.products)
    )
    return wrk.format("POST", "/v1/orders", bearer(user[2], JSON), body)
  end,
  create_v3 = function(user)
    local body = string.format(
      '{"user_id":%d,"items":[{"product_id":%d,"quantity":1}]}', user[1], math.random(data.products)
    )
    return wrk.format("POST", "/v3/orders", bearer(user[2], JSON), body)
  end,
  patch = function()
    local body = string.format('{"price_cents":%d}', math.random(100, 100000))
    local path = "/v1/products/" .. math.random(data.products)
    return wrk.format("PATCH", path, bearer(any(data.partners), MERGE_PATCH), body)
  end,
  patch_v3 = function()
    -- The seeded products are all in euros: the same prices as v1's patch, as v3 writes them.
    local cents = math.random(100, 100000)
    local body = string.format(
      '{"price":{"amount":"%d.%02d","currency":"EUR"}}', math.floor(cents / 100), cents % 100
    )
    local path = "/v3/products/" .. math.random(data.products)
    return wrk.format("PATCH", path, bearer(any(data.partners), MERGE_PATCH), body)
  end,
  -- A page the client holds, asked again with its ETag: unchanged, it is a 304 with no body.
  conditional = function()
    local held = any(revalidations)
    return wrk.format("GET", held[2], bearer(held[1], {["If-None-Match"] = held[3]}))
  end,
}

-- The mix, as cumulative percentages; a version's mix takes its operations (suffix "_v3").
local MIX = {{40, "list"}, {70, "get"}, {85, "orders"}, {95, "create"}, {100, "patch"}}
local MIXES = {mix = "", mix_v3 = "_v3"}

local function next_request()
  local user = any(data.users)
  local version = MIXES[mix]
  if not version then
    return requests[mix](user)
  end
  local pick = math.random(100)
  for _, share in ipairs(MIX) do
    if pick <= share[1] then
      return requests[share[2] .. version](user)
    end
  end
end

function request()
  return stamped(next_request())
end

-- Each thread's answers, timed from their due time (ms): every one, the 2xx, the 503s; and the
-- 503s that came without Retry-After.
timed_all, timed_ok, timed_shed, shed_without_retry_after = {}, {}, {}, 0

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status >= 400 and not error_bodies[status] then
    error_bodies[status] = body
  end
  local id = headers["x-request-id"] or headers["X-Request-ID"] or ""
  local at = tonumber(id:match("^bench%-([%d.]+)$"))
  if at then
    local ms = now_ms() - at
    timed_all[#timed_all + 1] = ms
    if status >= 200 and status < 300 then
      timed_ok[#timed_ok + 1] = ms
    elseif status == 503 then
      timed_shed[#timed_shed + 1] = ms
    end
  end
  if status == 503 and not (headers["retry-after"] or headers["Retry-After"]) then
    shed_without_retry_after = shed_without_retry_after + 1
  end
end

function done(summary, latency, requests)
  local function out(key, value)
    io.write(string.format("BENCH %s %s\n", key, tostring(value)))
  end
  out("requests", summary.requests)
  out("duration_us", summary.duration)
  for _, kind in ipairs({"connect", "read", "write", "status", "timeout"}) do
    out("errors_" .. kind, summary.errors[kind])
  end
  for _, p in ipairs({50, 90, 95, 99, 99.9}) do
    out("latency_p" .. p .. "_us", latency:percentile(p))
  end
  out("latency_max_us", latency.max)
  for _, name in ipairs({"timed_all", "timed_ok", "timed_shed"}) do
    local all = {}
    for _, thread in ipairs(threads) do
      for _, ms in ipairs(thread:get(name)) do
        all[#all + 1] = ms
      end
    end
    table.sort(all)
    out(name .. "_count", #all)
    if #all > 0 then
      for _, p in ipairs({50, 90, 99}) do
        out(name .. "_p" .. p .. "_ms", all[math.max(1, math.ceil(#all * p / 100))])
      end
      out(name .. "_max_ms", all[#all])
    end
  end
  local without = 0
  for _, thread in ipairs(threads) do
    without = without + thread:get("shed_without_retry_after")
  end
  out("shed_without_retry_after", without)
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      out("status_" .. status, count)
    end
    for status, body in pairs(thread:get("error_bodies")) do
      out("error_body_" .. status, (body:gsub("[\r\n]", " ")))
    end
  end
end
