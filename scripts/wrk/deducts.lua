-- Deducts of 1 fen, each under a fresh Idempotency-Key and order id. WALLETS wallets per thread
-- (1 = one hot wallet per thread; HOT=1 = one wallet for all threads); REPLAY=1 sends one key
-- again and again (every answer after the first is a replay).
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local key = os.getenv("API_KEY")
local wallets = tonumber(os.getenv("WALLETS") or "50")
local hot = os.getenv("HOT") == "1"
local replay = os.getenv("REPLAY") == "1"
local n = 0

request = function()
   local user = hot and "hot" or ("w-" .. id .. "-" .. ((replay and 0 or n) % wallets))
   local order = replay and (prefix .. "-replayed") or (prefix .. "-" .. n)
   n = n + 1
   return wrk.format("POST", "/v1/wallets/" .. user .. "/deduct", {
      ["Authorization"] = "Bearer " .. key,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = replay and (prefix .. "-replay") or ("d-" .. order),
   }, '{"order_id":"' .. order .. '","amount":1}')
end

response = function(status, headers, body)
   count(status)
end
