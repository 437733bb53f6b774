-- Pattern cases compared against PUC Lua 5.1 (testdata/patterns.out was
-- produced by `lua5.1 testdata/patterns.lua`). Each line is one call's
-- results, or "error" (the messages differ in their prefixes).
local out = {}
local function show(name, ok, ...)
  local parts = {}
  if not ok then
    parts[1] = "error"
  else
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      parts[#parts + 1] = type(v) .. ":" .. tostring(v)
    end
  end
  out[#out + 1] = name .. " => " .. table.concat(parts, " ")
end
local function try(name, f, ...) show(name, pcall(f, ...)) end
local function gm(s, p)
  local r = {}
  for a, b, c in string.gmatch(s, p) do r[#r + 1] = tostring(a) .. "," .. tostring(b) .. "," .. tostring(c) end
  return table.concat(r, ";")
end
local finds = {
  {"hello world", "o", 1}, {"hello world", "o", 6}, {"hello world", "o", -3}, {"hello world", "l+"},
  {"hello world", "(l+)(o)"}, {"hello", "()ll()"}, {"hello", "^h"}, {"hello", "^e"}, {"hello", "o$"},
  {"hello", "l$"}, {"a.b", ".", 1, true}, {"a.b", "%."}, {"a+b", "+", 1, true}, {"", ""}, {"abc", "", 10},
  {"abc", "", 4}, {"abc", "", -10}, {"  trim  ", "^%s*(.-)%s*$"}, {"key = value", "^(%w+)%s*=%s*(%w+)$"},
  {"THE (quick) fox", "%((%a+)%)"}, {"f(a(b)c)d", "%b()"}, {"[[x]]", "%b[]"}, {"THE quick", "%f[%a]%a+"},
  {"hello", "%f[%l]"}, {"x = 10, y = 20", "(%a)%s*=%s*(%d+)", 5}, {"aaa", "a-b"}, {"aaab", "a-b"},
  {"aaab", "a*"}, {"aaab", "a?a?b"}, {"abc", "[a-b]+"}, {"abc", "[^a]+"}, {"a]b", "[]]"}, {"a-b", "[a-]+"},
  {"a%b", "[%%]"}, {"abcabc", "(abc)%1"}, {"abab", "(a)(b)%2"}, {"x", "%z"}, {"a\0b", "%z"}, {"ABCdef", "%u+"},
  {"ABCdef", "%U+"}, {"12ab", "%x+"}, {"\t\n x", "%s+"}, {"a,b;c", "%p"}, {"tab\there", "%c"}, {"^a", "^^a"},
  {"a^", "a^"}, {"$x", "$x"}, {"x$", "x$$"}, {"hello", "(h)(e)(l)(l)(o)"}, {"date 2024-01-02", "(%d+)-(%d+)-(%d+)"},
  {12345, "3"}, {"abc", "b", 2.0}, {"hello", "()", 3}, {"a.b.c", "%.", 3},
}
for i, c in ipairs(finds) do
  try("find" .. i, string.find, c[1], c[2], c[3], c[4])
  try("match" .. i, string.match, c[1], c[2], c[3])
end
local gsubs = {
  {"hello world", "o", "0"}, {"hello world", "(o)", "[%1]"}, {"hello world", "o", "%0%0"}, {"hello", "", "-"},
  {"hello world", "%w+", "<%0>", 1}, {"abc", "%w", "%%"}, {"hello", "l", {l = "L"}}, {"hello", "(h)(e)", {h = "H"}},
  {"hello", "l", {l = false}}, {"$name is $age", "%$(%w+)", {name = "bob", age = 42}}, {"abc", "^a", "X"},
  {"aaa", "^a", "X"}, {"  x  ", "^%s+", ""}, {"x", "x*", "-"}, {"abc", ".", {a = 1, b = true}},
  {"hello world", "(%w+) (%w+)", "%2 %1"}, {"abc", "()", "%1"}, {"abc", "b", "%2"},
  {"abc", "(", "x"}, {"abc", "%", "x"}, {"abc", "[a", "x"}, {"abc", "%f", "x"}, {"abc", "%b", "x"},
  {"abc", ")", "x"}, {"abc", "(()", "x"}, {"a b c", " ", "", 1}, {"a b c", " ", "", 0}, {"a b c", " ", "", -1},
  {123, "2", 9}, {"abc", "b", 7.5}, {"hello", "(l)(l)", "%2%1"}, {"x", "x", "%a"},
}
for i, c in ipairs(gsubs) do
  try("gsub" .. i, string.gsub, c[1], c[2], c[3], c[4])
end
try("gsubfn1", string.gsub, "hello world", "%w+", function(w) return w:upper() end)
try("gsubfn2", string.gsub, "a=1, b=2", "(%w+)=(%w+)", function(k, v) return v .. "=" .. k end)
try("gsubfn3", string.gsub, "abc", "%w", function(c) if c == "b" then return nil end return c .. c end)
try("gsubfn4", string.gsub, "abc", "%w", function() return {} end)
try("gsubfn5", string.gsub, "abc", "()b()", function(a, b) return a + b end)
try("gsubbad", string.gsub, "abc", "b", true)
local gms = {
  {"hello world from lua", "%a+"}, {"k1=v1, k2=v2", "(%w+)=(%w+)"}, {"abc", ""}, {"abc", "()"},
  {"aXbXc", "[^X]*"}, {"^a^b", "^%a"}, {"one two", "(%a+)()"}, {"", "x*"},
}
for i, c in ipairs(gms) do
  try("gmatch" .. i, gm, c[1], c[2])
end
try("gmatchbad", gm, "abc", "%")
try("findbadcap", string.find, "abc", "%1")
try("findtoomany", string.find, string.rep("a", 40), string.rep("(a)", 33))
try("find32", string.find, string.rep("a", 40), string.rep("(a)", 32))
return table.concat(out, "\n")
