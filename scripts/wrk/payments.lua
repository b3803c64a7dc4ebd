-- Order, then payment attempt for it, alternately on each connection (run with -c equal to -t):
-- every 201 of a payment is one new pending payment created at the channel simulator.
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local key = os.getenv("API_KEY")
local n = 0
local creating_order = true

request = function()
   local order = prefix .. "-" .. n
   if creating_order then
      return wrk.format("POST", "/v1/orders", {
         ["Authorization"] = "Bearer " .. key,
         ["Content-Type"] = "application/json",
      }, '{"order_id":"' .. order .. '","user_id":"u-' .. id .. '","amount":100,"currency":"CNY"}')
   end
   return wrk.format("POST", "/v1/orders/" .. order .. "/payments", {
      ["Authorization"] = "Bearer " .. key,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = "pay-" .. order,
   }, '{"channel":"alipay"}')
end

response = function(status, headers, body)
   if creating_order then
      count(status * 1000) -- orders are counted apart: 201000 = order created
   else
      count(status)
      n = n + 1
   end
   creating_order = not creating_order
end
