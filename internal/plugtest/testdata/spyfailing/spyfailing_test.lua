-- Each test fails, saying why.
local api = require("lib.api")

it("called_with", function()
  local s = stub(api, "request").returns({ id = 1 })
  loom.test.run("CREATE", { hostname = "web1" })
  assert.stub(s).was.called_with(match._, "POST", "/v1/servers", { name = "loom-web2" })
end)

it("called times", function()
  local s = spy.on(SpyFailing, "remember")
  stub(api, "request").returns({ id = 1 })
  loom.test.run("CREATE")
  assert.spy(s).was.called(2)
end)

it("was_not", function()
  local s = stub(api, "request").returns({ id = 1 })
  loom.test.run("CREATE")
  assert.spy(s).was_not.called()
end)

it("is_not", function()
  assert.is_not.equal(1, 1)
end)

it("has_no", function()
  assert.has_no.errors(function() error("kaboom") end)
end)

it("near", function()
  assert.near(1, 1.5, 0.1)
end)

it("unknown word", function()
  assert.is_shiny(1)
end)

it("not a spy", function()
  assert.spy(print).was.called()
end)
