-- The virtual clock: sleeps and retry waits take no real time.
local clock = loom.test.clock

describe("the virtual clock", function()
  it("makes back-off instant and records each wait", function()
    local api = loom.test.http({ host = "api.example.com" })
    api:route("GET", "/status", { { json = { up = false } }, { json = { up = false } }, { json = { up = false } }, { json = { up = true } } })
    local before = os.time()
    local res = loom.test.run("CREATE")
    assert.equals(0, res.status)
    assert.same({ 1, 2, 4 }, clock.sleeps())
    assert.equals(7, clock.slept())
    assert.equals(7, math.floor(res.result.waited + 0.5))
    assert.truthy(os.time() - before < 5, "the test took real time")
  end)

  it("starts each test afresh", function()
    assert.same({}, clock.sleeps())
  end)

  it("honours Retry-After without waiting for it", function()
    local api = loom.test.http({ host = "api.example.com" })
    api:route("GET", "/status", { { status = 429, headers = { ["Retry-After"] = "20" } }, { json = { up = true } } })
    local res = loom.test.run("CREATE")
    assert.equals(0, res.status)
    assert.same({ 20 }, clock.sleeps())
  end)

  it("raises the hook's timeout when a sleep passes the deadline", function()
    -- The definition sets no timeouts: the hook has the default 10m, on
    -- the virtual clock, and fails as it would in production.
    local res = loom.test.run("CONFIRM")
    assert.equals(1, res.status)
    assert.matches("timed out after 10m0s", res.message)
    assert.equals("timeout", res.error.kind)
    assert.same({ 7200 }, clock.sleeps())
  end)

  it("moves with advance and set", function()
    clock.set(1000)
    assert.equals(1000, clock.now())
    assert.equals(1030, clock.advance(30))
  end)
end)
