-- busted's lifecycle: every test here must pass, in this order.
local order = {}
local function log(s) order[#order + 1] = s end
local lt = require("loom.test")

setup(function() log("file setup") end)
teardown(function() log("file teardown") end)

describe("setup and teardown #fast", function()
  setup(function() log("setup") end)
  lazy_setup(function() log("lazy_setup") end)
  before_all(function() log("before_all") end)
  before_each(function() log("before_each") end)
  after_each(function() log("after_each") end)
  after_all(function() log("after_all") end)
  lazy_teardown(function() log("lazy_teardown") end)
  teardown(function() log("teardown") end)

  it("runs the setups once, before the first test", function()
    assert.same({ "file setup", "setup", "lazy_setup", "before_all", "before_each" }, order)
  end)

  it("and before_each before every test", function()
    assert.same({ "after_each", "before_each" }, { order[6], order[7] })
    assert.equals(7, #order)
  end)
end)

describe("after a block", function()
  it("its teardowns ran, lazy ones first", function()
    assert.same({ "after_each", "after_all", "lazy_teardown", "teardown" }, { order[8], order[9], order[10], order[11] })
  end)
end)

local filtered_ran = false
describe("a block whose tests all filter out", function()
  lazy_setup(function() log("lazy setup of the filtered block") end)
  setup(function() log("strict setup runs anyway") end)
  it("is left out by --exclude-tags #slow", function() filtered_ran = true end)
end)

describe("filters", function()
  it("ran a block's strict setup, and its lazy one only when one of its tests ran", function()
    assert.contains("strict setup runs anyway", order)
    local lazy = false
    for _, s in ipairs(order) do lazy = lazy or s == "lazy setup of the filtered block" end
    assert.equals(filtered_ran, lazy)
  end)
end)

describe("finally", function()
  local closed = {}
  it("runs when the test ends", function()
    finally(function() closed[#closed + 1] = "first" end)
    finally(function() closed[#closed + 1] = "second" end)
  end)
  it("ran the last one registered first", function()
    assert.same({ "second", "first" }, closed)
  end)
end)

insulate("insulate", function()
  it("keeps what a test sets in the globals inside the block", function()
    leaked = "inside"
    _G.counter = 100
    assert.equals("inside", leaked)
  end)
end)

describe("after insulate", function()
  it("the globals are as they were", function()
    assert.is_nil(leaked)
    assert.equals(0, counter)
  end)
end)

expose("expose", function()
  it("lets what a test sets out of the block", function() exposed = true end)
end)

context("context is describe", function()
  it("saw expose's global", function() assert.is_true(exposed) end)
end)

describe("pending", function()
  pending("is reported, not run")
  it("called inside a test stops it #slow", function()
    pending("not ready")
    error("never reached")
  end)
end)

describe("hooks share the test's VM", function()
  it("so a test sees the plugin's globals after a hook ran", function()
    local res = lt.run("CREATE")
    assert.equals(1, res.result.counter)
    assert.equals(1, counter)
  end)
end)

describe("luassert's words", function()
  it("negate with not and no", function()
    assert.is_not.equal(1, 2)
    assert.are_not.same({ 1 }, { 2 })
    assert.is_not_nil(0)
    assert.has_no.errors(function() end)
    assert.is_not.truthy(nil)
    assert.does_not.match("^x", "abc")
    assert.is_not.near(1, 2, 0.5)
  end)

  it("near, unique, types, error_matches and message", function()
    assert.near(3.14, math.pi, 0.01)
    assert.is.near(10, 10.4, 0.5)
    assert.unique({ 1, 2, { a = 1 }, { a = 2 } })
    assert.is_string("x")
    assert.is_number(1)
    assert.is_table({})
    assert.is_function(print)
    assert.is_boolean(false)
    assert.is.True(true)
    assert.has_error(function() error("boom 42") end, "boom")
    assert.error_matches(function() error("code 42 here") end, "code %d+")
    local e = assert.has.errors(function() error({ code = 7 }) end)
    assert.equals(7, e.code)
    assert.message("custom").is_true(true)
  end)

  it("match in same", function()
    assert.same({ id = match.is_number(), name = match.matches("^web") }, { id = 3, name = "web1" })
    assert.same({ match._, match.is_not_nil() }, { 1, "x" })
  end)
end)
