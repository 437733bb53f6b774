-- A hook that never ends: --timeout (real time) stops it, and the failure
-- is at the plugin's own line.
it("a runaway hook", function()
  loom.test.run("CREATE")
end)
