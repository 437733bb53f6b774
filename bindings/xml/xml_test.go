package xml_test

import (
	"context"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/bindingstest"
	jsonb "github.com/loomrt/loom/bindings/json"
	xmlb "github.com/loomrt/loom/bindings/xml"
)

func newState(t *testing.T) *lua.LState {
	t.Helper()
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, xmlb.New(), jsonb.New())
	bindingstest.Run(t, L, `xml = require("loom.xml"); json = require("loom.json")`)
	return L
}

func eval(t *testing.T, L *lua.LState, code string) string {
	t.Helper()
	if err := L.DoString(code); err != nil {
		t.Fatalf("%s", bindingstest.ErrorMessage(err))
	}
	v := L.Get(-1)
	L.Pop(L.GetTop())
	if s, ok := v.(lua.LString); ok {
		return string(s)
	}
	return v.String()
}

// An EC2 DescribeInstances answer, as the API documents it (trimmed).
const describeInstances = `<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
    <reservationSet>
        <item>
            <reservationId>r-1234567890abcdef0</reservationId>
            <instancesSet>
                <item>
                    <instanceId>i-1234567890abcdef0</instanceId>
                    <instanceState><code>16</code><name>running</name></instanceState>
                    <privateIpAddress>10.0.0.12</privateIpAddress>
                    <ipAddress>54.194.252.215</ipAddress>
                    <groupSet/>
                    <tagSet>
                        <item><key>Name</key><value>web &amp; db</value></item>
                        <item><key>coopr-node</key><value>n1</value></item>
                    </tagSet>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
</DescribeInstancesResponse>`

func TestDecodeEC2Answer(t *testing.T) {
	L := newState(t)
	L.SetGlobal("doc", lua.LString(describeInstances))
	got := eval(t, L, `
		local r, root = xml.decode(doc)
		local inst = r.reservationSet.item[1].instancesSet.item[1]
		local tags = {}
		for _, tag in ipairs(inst.tagSet.item) do tags[#tags + 1] = tag.key .. "=" .. tag.value end
		return table.concat({root, r.requestId, #r.reservationSet.item, inst.instanceId, inst.instanceState.name,
			inst.instanceState.code, inst.ipAddress, type(inst.groupSet), inst.groupSet, table.concat(tags, ",")}, "|")`)
	want := "DescribeInstancesResponse|8f7724cf-496f-496e-8fe3-example|1|i-1234567890abcdef0|running|16|54.194.252.215|string||Name=web & db,coopr-node=n1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestDecodeMapping(t *testing.T) {
	L := newState(t)
	for code, want := range map[string]string{
		// A repeated name becomes a list; a single one stays a value.
		`local r = xml.decode("<a><b>1</b><b>2</b><c>3</c></a>"); return #r.b .. r.b[2] .. r.c`: "223",
		// Names in lists are lists even alone; opts.lists replaces the defaults.
		`local r = xml.decode("<a><item>1</item></a>"); return #r.item`:              "1",
		`local r = xml.decode("<a><item>1</item></a>", {lists = {}}); return r.item`: "1",
		`local r = xml.decode("<a><x>1</x></a>", {lists = {"x"}}); return #r.x`:      "1",
		// Attributes (not xmlns), text beside elements, CDATA, entities.
		`local r = xml.decode('<a xmlns:p="u" id="7"><p:b k="v">t</p:b>tail</a>'); return r._attr.id .. r.b._attr.k .. r.b._text .. r._text`: "7vttail",
		`return (xml.decode("<a><![CDATA[<raw> & ]]>&#65;&lt;</a>"))`:                                                                        "<raw> & A<",
		`return (xml.decode("<a/>"))`: "",
		`return select(2, xml.decode("<?xml version='1.0'?><!-- c --><Response/>"))`: "Response",
		// xml.list normalizes a value that may occur once or more.
		`return #xml.list(nil) .. #xml.list("x") .. #xml.list({a = 1}) .. #xml.list(xml.decode("<a><b>1</b><b>2</b></a>").b)`: "0112",
		// Lists encode as JSON arrays.
		`return json.encode(xml.decode("<a><item><k>1</k></item></a>"))`: `{"item":[{"k":"1"}]}`,
		`return xml.escape([[a<b & "c" 'd'>]])`:                          `a&lt;b &amp; &#34;c&#34; &#39;d&#39;&gt;`,
	} {
		if got := eval(t, L, code); got != want {
			t.Errorf("%s\n got %q\nwant %q", code, got, want)
		}
	}
}

func TestDecodeLimitsAndErrors(t *testing.T) {
	L := newState(t)
	deep := strings.Repeat("<a>", 70) + strings.Repeat("</a>", 70)
	many := "<r>" + strings.Repeat("<i/>", 1<<20+1) + "</r>"
	laughs := `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><lolz>&lol2;</lolz>`
	L.SetGlobal("deep", lua.LString(deep))
	L.SetGlobal("many", lua.LString(many))
	L.SetGlobal("laughs", lua.LString(laughs))
	for code, want := range map[string]string{
		`xml.decode(deep)`:             "config: xml.decode: line 1: elements nest deeper than max_depth (64)",
		`xml.decode("<a><b></a>")`:     "config: xml.decode: line 1: element <b> closed by </a>",
		`xml.decode("<a>\n<b>\n</a>")`: "config: xml.decode: line 3: element <b> closed by </a>",
		`xml.decode("<a>")`:            "config: xml.decode: line 1: unexpected EOF",
		`xml.decode("")`:               "config: xml.decode: no root element",
		`xml.decode("<a/><b/>")`:       "config: xml.decode: line 1: a second root element <b>",
		`xml.decode("<a/>junk")`:       "config: xml.decode: line 1: text outside the root element",
		`xml.decode("<a>&nbsp;</a>")`:  "config: xml.decode: line 1: invalid character entity &nbsp;",
		`xml.decode(laughs)`:           "config: xml.decode: line 1: invalid character entity &lol2;",
		`xml.decode('<?xml version="1.0" encoding="ISO-8859-1"?><a/>')`:         "config: xml.decode: line 1: xml: encoding \"ISO-8859-1\" declared but Decoder.CharsetReader is nil",
		`xml.decode("<a>" .. string.rep("x", 100) .. "</a>", {max_bytes = 50})`: "config: xml.decode: the document is 107 bytes, over the max_bytes limit of 50",
		`xml.decode("<a/>", {max_depth = 1000})`:                                "config: xml.decode: opts.max_depth must be an integer from 1 to 256",
		`xml.decode("<a/>", {list = {}})`:                                       "config: xml.decode: unknown option list",
		`xml.decode("<a/>", {lists = "item"})`:                                  "config: xml.decode: opts.lists must be a list of element names",
		`xml.decode(many, {max_bytes = 64 * 1024 * 1024})`:                      "config: xml.decode: line 1: more than 1048576 elements",
	} {
		err := L.DoString(code)
		if got := bindingstest.ErrorMessage(err); err == nil || !strings.HasPrefix(got, want) {
			t.Errorf("%s:\n got %s\nwant %s...", code, got, want)
		}
	}
	// Within max_depth, the same nesting decodes.
	eval(t, L, `return xml.decode(deep, {max_depth = 70})`)
}

// A document decoded after the hook's deadline stops.
func TestDecodeStopsAtTheDeadline(t *testing.T) {
	h := bindingstest.NewHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	L := bindingstest.NewState(t, h, xmlb.New())
	L.SetContext(ctx)
	L.SetGlobal("big", lua.LString("<r>"+strings.Repeat("<i/>", 10000)+"</r>"))
	err := L.DoString(`require("loom.xml").decode(big)`)
	if err == nil || !strings.Contains(err.Error(), "context canceled") && !strings.Contains(bindingstest.ErrorMessage(err), "deadline") {
		t.Errorf("decode after the deadline: %v", err)
	}
}
