-- Every test here fails; plugtest_test.go checks how each is reported.
it("same", function()
  assert.same({ a = 1, b = { c = 2 } }, { a = 1, b = { c = 3 } })
end)

it("equals", function()
  assert.equals("x", "y", "the name")
end)

it("error", function()
  local t = nil
  return t.field
end)

it("handler", function()
  local f = loom.test.http({ host = "h.example.com" })
  f:route("GET", "/", function(req)
    assert.equals("POST", req.method)
  end)
  loom.test.run("CONFIRM", { providerid = "x" })
end)

it("unmatched", function()
  loom.test.http({ host = "h.example.com" })
  pcall(require("loom.http").get, "https://h.example.com/nothing")
end)

describe("with a failing before_each", function()
  before_each(function() error("setup failed") end)
  it("is reported", function() end)
end)

it("timeout", function()
  while true do end
end)

it("hook failure is in the logs", function()
  local res = loom.test.run("CREATE")
  assert.equals(0, res.status)
end)
