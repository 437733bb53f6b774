package ssh

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Quote returns s as one POSIX shell word: unchanged when it is made only
// of safe characters, otherwise in single quotes with embedded single
// quotes written as '\”.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// luaQuote is ssh.quote(s, ...): each argument quoted, joined by spaces.
func luaQuote(L *lua.LState) int {
	n := L.GetTop()
	if n == 0 {
		L.ArgError(1, "string expected")
	}
	parts := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			parts = append(parts, Quote(string(v)))
		case lua.LNumber:
			parts = append(parts, Quote(v.String()))
		case *lua.LTable:
			for j := 1; j <= v.Len(); j++ {
				parts = append(parts, Quote(lua.LVAsString(v.RawGetInt(j))))
			}
		default:
			L.ArgError(i, "string, number or list of strings expected")
		}
	}
	L.Push(lua.LString(strings.Join(parts, " ")))
	return 1
}
