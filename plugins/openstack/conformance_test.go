package openstack_test

// Conformance with OpenStack's own description of its APIs, offline, by
// gophercloud (github.com/gophercloud/gophercloud/v2, OpenStack's Go SDK):
//
//   - every request the plugin sends must be, key for key and value for
//     value, what gophercloud's request builders produce for the same call
//     (tokens.AuthOptions, servers.CreateOpts with keypairs.CreateOptsExt,
//     floatingips.CreateOpts; the list queries of servers, ports,
//     networks with the external extension, floating IPs and images);
//   - every answer of the fake must be read by gophercloud's extractors,
//     hold no key gophercloud's result types do not know (a misspelt
//     field would pass a loose reader), and have the shape of gophercloud's
//     own fixtures where they are importable (tokens: TokenOutput;
//     floating IPs: FipNoDNS);
//   - error answers have each service's documented error shape.
//
// Nova's server fixtures are in gophercloud's _test files, which cannot be
// imported; servers are checked against the SDK's Server type instead.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	tokensv2 "github.com/gophercloud/gophercloud/v2/openstack/identity/v2/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	tokenfixtures "github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens/testing"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	fipfixtures "github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips/testing"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"github.com/loomrt/loom/internal/cloudfake/openstackfake"
)

// checkConformance checks every exchange of the fake cloud (see the file
// comment); a failure is one of the fake's problems, which fail the test.
func checkConformance(t *testing.T, cloud *openstackfake.Fake) {
	cloud.SetCheck(func(ex openstackfake.Exchange) error {
		if err := checkRequest(ex); err != nil {
			return fmt.Errorf("request: %w", err)
		}
		if err := checkResponse(ex); err != nil {
			return fmt.Errorf("answer (HTTP %d): %w", ex.Status, err)
		}
		return nil
	})
}

// sameJSON compares two values as JSON.
func sameJSON(got, want any) error {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gv, wv any
	json.Unmarshal(g, &gv)
	json.Unmarshal(w, &wv)
	if !reflect.DeepEqual(gv, wv) {
		return fmt.Errorf("the plugin sent\n  %s\ngophercloud sends\n  %s", g, w)
	}
	return nil
}

func sameQuery(ex openstackfake.Exchange, want string) error {
	w, err := url.ParseQuery(strings.TrimPrefix(want, "?"))
	if err != nil {
		return err
	}
	got := url.Values(ex.Query)
	if len(got) == 0 && len(w) == 0 {
		return nil
	}
	if !reflect.DeepEqual(got, w) {
		return fmt.Errorf("query %q, gophercloud sends %q", got.Encode(), w.Encode())
	}
	return nil
}

func checkRequest(ex openstackfake.Exchange) error {
	var body map[string]any
	if len(ex.Body) > 0 {
		if err := json.Unmarshal(ex.Body, &body); err != nil {
			return fmt.Errorf("body is not a JSON object: %v", err)
		}
	}
	q := url.Values(ex.Query)
	switch {
	case ex.Service == "identity" && ex.Method == "POST" && ex.Path == "/auth/tokens":
		return checkTokenRequest(ex.Body)

	case ex.Service == "identity-v2" && ex.Method == "POST" && ex.Path == "/tokens":
		// Rackspace's API key credentials, as its SDKs (fog, pyrax,
		// gophercloud's rackspace provider) send them: nothing else.
		var doc struct {
			Auth map[string]map[string]string `json:"auth"`
		}
		if err := json.Unmarshal(ex.Body, &doc); err != nil {
			return err
		}
		cred, ok := doc.Auth["RAX-KSKEY:apiKeyCredentials"]
		if len(doc.Auth) != 1 || !ok || len(cred) != 2 || cred["username"] == "" || cred["apiKey"] == "" {
			return fmt.Errorf("body %s, want {\"auth\": {\"RAX-KSKEY:apiKeyCredentials\": {\"username\", \"apiKey\"}}}", ex.Body)
		}
		return nil

	case ex.Service == "compute" && ex.Method == "POST" && ex.Path == "/servers":
		return checkServerCreate(ex.Body)

	case ex.Service == "compute" && ex.Method == "GET" && ex.Path == "/servers/detail":
		opts := servers.ListOpts{Name: q.Get("name"), Marker: q.Get("marker")}
		if l := q.Get("limit"); l != "" {
			fmt.Sscan(l, &opts.Limit)
		}
		want, err := opts.ToServerListQuery()
		if err != nil {
			return err
		}
		return sameQuery(ex, want)

	case ex.Service == "compute" && ex.Method == "GET" && ex.Path == "/flavors":
		want, _ := flavors.ListOpts{}.ToFlavorListQuery()
		return sameQuery(ex, strings.TrimPrefix(want, "?"))

	case ex.Service == "network" && ex.Method == "GET" && ex.Path == "/v2.0/ports":
		want, _ := ports.ListOpts{DeviceID: q.Get("device_id")}.ToPortListQuery()
		return sameQuery(ex, want)

	case ex.Service == "network" && ex.Method == "GET" && ex.Path == "/v2.0/networks":
		yes := true
		want, err := external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}.ToNetworkListQuery()
		if err != nil {
			return err
		}
		return sameQuery(ex, want)

	case ex.Service == "network" && ex.Method == "GET" && ex.Path == "/v2.0/floatingips":
		want, _ := floatingips.ListOpts{PortID: q.Get("port_id"), Description: q.Get("description")}.ToFloatingIPListQuery()
		return sameQuery(ex, want)

	case ex.Service == "network" && ex.Method == "POST" && ex.Path == "/v2.0/floatingips":
		var doc struct {
			FloatingIP struct {
				FloatingNetworkID string `json:"floating_network_id"`
				PortID            string `json:"port_id"`
				FixedIP           string `json:"fixed_ip_address"`
				Description       string `json:"description"`
			} `json:"floatingip"`
		}
		json.Unmarshal(ex.Body, &doc)
		d := doc.FloatingIP
		want, err := floatingips.CreateOpts{FloatingNetworkID: d.FloatingNetworkID, PortID: d.PortID, FixedIP: d.FixedIP,
			Description: d.Description}.ToFloatingIPCreateMap()
		if err != nil {
			return err
		}
		return sameJSON(body, want)

	case ex.Service == "image" && ex.Method == "GET" && ex.Path == "/v2/images":
		want, _ := images.ListOpts{Name: q.Get("name"), Status: images.ImageStatus(q.Get("status"))}.ToImageListQuery()
		return sameQuery(ex, want)
	}
	// Bodiless calls on a resource (GET/DELETE /servers/{id}, /flavors/{id},
	// DELETE /v2.0/floatingips/{id}) take no query and no body.
	if len(ex.Body) > 0 || len(ex.Query) > 0 {
		return fmt.Errorf("%s %s with a body or query gophercloud does not send", ex.Method, ex.Path)
	}
	return nil
}

// checkTokenRequest rebuilds the plugin's token request with
// tokens.AuthOptions and compares.
func checkTokenRequest(raw []byte) error {
	var doc struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						Name, Password string
						Domain         struct{ Name string }
					}
				}
				AppCred struct {
					ID, Name, Secret string
					User             struct {
						Name   string
						Domain struct{ Name string }
					}
				} `json:"application_credential"`
			}
			Scope struct {
				Project struct {
					ID, Name string
					Domain   struct{ Name string }
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	id := doc.Auth.Identity
	var opts tokens.AuthOptions
	if slices.Contains(id.Methods, "application_credential") {
		a := id.AppCred
		opts = tokens.AuthOptions{ApplicationCredentialID: a.ID, ApplicationCredentialName: a.Name,
			ApplicationCredentialSecret: a.Secret, Username: a.User.Name, DomainName: a.User.Domain.Name}
	} else {
		u := id.Password.User
		p := doc.Auth.Scope.Project
		opts = tokens.AuthOptions{Username: u.Name, Password: u.Password, DomainName: u.Domain.Name,
			Scope: tokens.Scope{ProjectID: p.ID, ProjectName: p.Name, DomainName: p.Domain.Name}}
	}
	scope, err := opts.ToTokenV3ScopeMap()
	if err != nil {
		return err
	}
	want, err := opts.ToTokenV3CreateMap(scope)
	if err != nil {
		return err
	}
	var got any
	json.Unmarshal(raw, &got)
	return sameJSON(got, want)
}

// checkServerCreate rebuilds the plugin's server create request with
// servers.CreateOpts (and the key pair extension) and compares.
func checkServerCreate(raw []byte) error {
	var doc struct {
		Server struct {
			Name, ImageRef, FlavorRef string
			AZ                        string                  `json:"availability_zone"`
			Metadata                  map[string]string       `json:"metadata"`
			KeyName                   string                  `json:"key_name"`
			UserData                  *string                 `json:"user_data"`
			ConfigDrive               *bool                   `json:"config_drive"`
			SecurityGroups            []struct{ Name string } `json:"security_groups"`
			Networks                  []struct{ UUID string }
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	s := doc.Server
	opts := servers.CreateOpts{Name: s.Name, ImageRef: s.ImageRef, FlavorRef: s.FlavorRef, AvailabilityZone: s.AZ,
		Metadata: s.Metadata, ConfigDrive: s.ConfigDrive}
	for _, g := range s.SecurityGroups {
		opts.SecurityGroups = append(opts.SecurityGroups, g.Name)
	}
	if len(s.Networks) > 0 {
		var nets []servers.Network
		for _, n := range s.Networks {
			nets = append(nets, servers.Network{UUID: n.UUID})
		}
		opts.Networks = nets
	}
	if s.UserData != nil {
		// gophercloud sends base64 as it is and encodes anything else.
		opts.UserData = []byte(*s.UserData)
	}
	var builder servers.CreateOptsBuilder = opts
	if s.KeyName != "" {
		builder = keypairs.CreateOptsExt{CreateOptsBuilder: opts, KeyName: s.KeyName}
	}
	want, err := builder.ToServerCreateMap()
	if err != nil {
		return err
	}
	var got any
	json.Unmarshal(raw, &got)
	return sameJSON(got, want)
}

func result(ex openstackfake.Exchange) (gophercloud.Result, error) {
	var body any
	if err := json.Unmarshal(ex.RespBody, &body); err != nil {
		return gophercloud.Result{}, fmt.Errorf("not JSON: %v", err)
	}
	return gophercloud.Result{Body: body, Header: ex.RespHeader}, nil
}

func page(ex openstackfake.Exchange) (pagination.PageResult, error) {
	r, err := result(ex)
	return pagination.PageResult{Result: r}, err
}

func checkResponse(ex openstackfake.Exchange) error {
	if ex.Status == 0 || ex.Status == 204 {
		return nil
	}
	if ex.Status >= 400 {
		return checkErrorShape(ex)
	}
	switch {
	case ex.Service == "identity":
		r, err := result(ex)
		if err != nil {
			return err
		}
		cr := tokens.CreateResult{}
		cr.Result = r
		if _, err := cr.ExtractToken(); err != nil {
			return err
		}
		if id, err := cr.ExtractTokenID(); err != nil || id == "" {
			return fmt.Errorf("no X-Subject-Token: %v", err)
		}
		if _, err := cr.ExtractServiceCatalog(); err != nil {
			return err
		}
		if _, err := cr.ExtractProject(); err != nil {
			return err
		}
		return shapeLike(ex.RespBody, []byte(tokenfixtures.TokenOutput), "token fixture TokenOutput")

	case ex.Service == "identity-v2":
		r, err := result(ex)
		if err != nil {
			return err
		}
		cr := tokensv2.CreateResult{}
		cr.Result = r
		if id, err := cr.ExtractTokenID(); err != nil || id == "" {
			return fmt.Errorf("token id %q: %v", id, err)
		}
		// Rackspace writes the expiry with its zone's offset
		// ("2014-01-15T20:01:33.000-06:00"), which gophercloud's
		// OpenStack v2 reader (a literal Z) does not take.
		var doc struct {
			Access struct {
				Token struct{ Expires string } `json:"token"`
			} `json:"access"`
		}
		if err := json.Unmarshal(ex.RespBody, &doc); err != nil {
			return err
		}
		if _, err := time.Parse(time.RFC3339, doc.Access.Token.Expires); err != nil {
			return fmt.Errorf("token expiry: %v", err)
		}
		cat, err := cr.ExtractServiceCatalog()
		if err != nil || len(cat.Entries) == 0 {
			return fmt.Errorf("service catalog %v: %v", cat, err)
		}
		return nil

	case ex.Service == "compute" && ex.Path == "/servers/detail":
		p, err := page(ex)
		if err != nil {
			return err
		}
		list, err := servers.ExtractServers(servers.ServerPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}})
		if err != nil {
			return err
		}
		var doc struct{ Servers []map[string]any }
		json.Unmarshal(ex.RespBody, &doc)
		if len(list) != len(doc.Servers) {
			return fmt.Errorf("gophercloud read %d servers of %d", len(list), len(doc.Servers))
		}
		for _, s := range doc.Servers {
			if err := knownKeys(s, serverKeys(), "servers.Server"); err != nil {
				return err
			}
		}
		return nil

	case ex.Service == "compute" && ex.Method == "POST" && ex.Path == "/servers":
		r, err := result(ex)
		if err != nil {
			return err
		}
		cr := servers.CreateResult{}
		cr.Result = r
		s, err := cr.Extract()
		if err != nil || s.ID == "" {
			return fmt.Errorf("gophercloud cannot read the created server: %v", err)
		}
		return nil

	case ex.Service == "compute" && strings.HasPrefix(ex.Path, "/servers/"):
		r, err := result(ex)
		if err != nil {
			return err
		}
		gr := servers.GetResult{}
		gr.Result = r
		if _, err := gr.Extract(); err != nil {
			return err
		}
		var doc struct{ Server map[string]any }
		json.Unmarshal(ex.RespBody, &doc)
		return knownKeys(doc.Server, serverKeys(), "servers.Server")

	case ex.Service == "compute" && ex.Path == "/flavors":
		p, err := page(ex)
		if err != nil {
			return err
		}
		_, err = flavors.ExtractFlavors(flavors.FlavorPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}})
		return err

	case ex.Service == "compute" && strings.HasPrefix(ex.Path, "/flavors/"):
		r, err := result(ex)
		if err != nil {
			return err
		}
		gr := flavors.GetResult{}
		gr.Result = r
		_, err = gr.Extract()
		return err

	case ex.Service == "network" && ex.Path == "/v2.0/ports":
		p, err := page(ex)
		if err != nil {
			return err
		}
		_, err = ports.ExtractPorts(ports.PortPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}})
		return err

	case ex.Service == "network" && ex.Path == "/v2.0/networks":
		p, err := page(ex)
		if err != nil {
			return err
		}
		var nets []struct {
			networks.Network
			external.NetworkExternalExt
		}
		if err := networks.ExtractNetworksInto(networks.NetworkPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}}, &nets); err != nil {
			return err
		}
		for _, n := range nets {
			if !n.External {
				return fmt.Errorf("network %s listed for router:external=true is not external", n.ID)
			}
		}
		return nil

	case ex.Service == "network" && ex.Path == "/v2.0/floatingips" && ex.Method == "GET":
		p, err := page(ex)
		if err != nil {
			return err
		}
		if _, err := floatingips.ExtractFloatingIPs(floatingips.FloatingIPPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}}); err != nil {
			return err
		}
		var doc struct{ Floatingips []json.RawMessage }
		json.Unmarshal(ex.RespBody, &doc)
		for _, f := range doc.Floatingips {
			if err := fipShape(f); err != nil {
				return err
			}
		}
		return nil

	case ex.Service == "network" && ex.Path == "/v2.0/floatingips" && ex.Method == "POST":
		r, err := result(ex)
		if err != nil {
			return err
		}
		cr := floatingips.CreateResult{}
		cr.Result = r
		if _, err := cr.Extract(); err != nil {
			return err
		}
		var doc struct{ Floatingip json.RawMessage }
		json.Unmarshal(ex.RespBody, &doc)
		return fipShape(doc.Floatingip)

	case ex.Service == "image":
		p, err := page(ex)
		if err != nil {
			return err
		}
		_, err = images.ExtractImages(images.ImagePage{LinkedPageBase: pagination.LinkedPageBase{PageResult: p}})
		return err
	}
	return fmt.Errorf("no gophercloud check for %s %s %s", ex.Service, ex.Method, ex.Path)
}

// checkErrorShape: Nova {"<kind>": {"code", "message"}}, Neutron
// {"NeutronError": {"type", "message", "detail"}}, Keystone (and
// keystonemiddleware's 401 of every service) {"error": {"code", "title",
// "message"}}.
func checkErrorShape(ex openstackfake.Exchange) error {
	if len(bytes.TrimSpace(ex.RespBody)) == 0 {
		return nil
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(ex.RespBody, &doc); err != nil || len(doc) != 1 {
		return fmt.Errorf("error body is not {kind: {...}}: %s", ex.RespBody)
	}
	for k, v := range doc {
		service := ex.Service
		if ex.Status == http.StatusUnauthorized && service != "identity-v2" {
			service = "identity" // keystonemiddleware answers 401 for every service
		}
		switch service {
		case "network":
			if k != "NeutronError" || v["type"] == nil || v["message"] == nil {
				return fmt.Errorf("not Neutron's error shape: %s", ex.RespBody)
			}
		case "identity":
			if k != "error" || v["code"] == nil || v["message"] == nil || v["title"] == nil {
				return fmt.Errorf("not Keystone's error shape: %s", ex.RespBody)
			}
		default:
			// Nova's, and Rackspace's identity service's (v2.0).
			if v["code"] == nil || v["message"] == nil {
				return fmt.Errorf("not Nova's error shape: %s", ex.RespBody)
			}
		}
	}
	return nil
}

// serverKeys are the JSON keys gophercloud's servers.Server reads: its
// tags, and those its UnmarshalJSON reads itself.
func serverKeys() map[string]bool {
	keys := map[string]bool{"image": true, "os-srv-usg:launched_at": true, "os-srv-usg:terminated_at": true,
		"config_drive": true}
	tp := reflect.TypeOf(servers.Server{})
	for i := 0; i < tp.NumField(); i++ {
		name, _, _ := strings.Cut(tp.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[strings.ToLower(name)] = true
		}
	}
	return keys
}

func knownKeys(obj map[string]any, known map[string]bool, what string) error {
	var unknown []string
	for k := range obj {
		if !known[strings.ToLower(k)] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		return fmt.Errorf("keys %v are not fields of gophercloud's %s", unknown, what)
	}
	return nil
}

// fipShape: the keys of gophercloud's floating IP fixture, and its type's.
func fipShape(raw []byte) error {
	known := map[string]bool{}
	var fixture map[string]any
	json.Unmarshal([]byte(fipfixtures.FipNoDNS), &fixture)
	for k := range fixture {
		known[k] = true
	}
	tp := reflect.TypeOf(floatingips.FloatingIP{})
	for i := 0; i < tp.NumField(); i++ {
		name, _, _ := strings.Cut(tp.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	if err := knownKeys(obj, known, "FloatingIP (and fixture FipNoDNS)"); err != nil {
		return err
	}
	return sameTypes(obj, fixture, "floatingip")
}

// shapeLike checks that every key of got (recursively, through objects and
// the first element of arrays) is in the fixture, with the same JSON type
// (null matches anything).
func shapeLike(got, fixture []byte, what string) error {
	var g, f any
	if err := json.Unmarshal(got, &g); err != nil {
		return err
	}
	json.Unmarshal(fixture, &f)
	return walkShape(g, f, what)
}

func walkShape(g, f any, path string) error {
	switch gv := g.(type) {
	case map[string]any:
		fv, ok := f.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: an object where the fixture has %T", path, f)
		}
		for k, x := range gv {
			y, ok := fv[k]
			if !ok {
				return fmt.Errorf("%s.%s: not in the fixture", path, k)
			}
			if err := walkShape(x, y, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		fv, ok := f.([]any)
		if !ok {
			return fmt.Errorf("%s: an array where the fixture has %T", path, f)
		}
		if len(gv) > 0 && len(fv) > 0 {
			return walkShape(gv[0], fv[0], path+"[0]")
		}
	default:
		if g != nil && f != nil && reflect.TypeOf(g) != reflect.TypeOf(f) {
			return fmt.Errorf("%s: %T where the fixture has %T", path, g, f)
		}
	}
	return nil
}

func sameTypes(obj, fixture map[string]any, path string) error {
	for k, v := range obj {
		if fv, ok := fixture[k]; ok && v != nil && fv != nil && reflect.TypeOf(v) != reflect.TypeOf(fv) {
			return fmt.Errorf("%s.%s: %T where gophercloud's fixture has %T", path, k, v, fv)
		}
	}
	return nil
}

// TestConformanceCatchesViolations proves the checks can fail: requests
// and answers that differ from gophercloud's are reported.
func TestConformanceCatchesViolations(t *testing.T) {
	bad := []openstackfake.Exchange{
		// a misspelt key in the server create request
		{Service: "compute", Method: "POST", Path: "/servers", Body: []byte(`{"server":{"name":"a","flavorRef":"2","imageRef":"i","keyname":"k"}}`)},
		// networks as names, not {"uuid"}
		{Service: "compute", Method: "POST", Path: "/servers", Body: []byte(`{"server":{"name":"a","flavorRef":"2","imageRef":"i","networks":[{"name":"n"}]}}`)},
		// a token request without the user's domain
		{Service: "identity", Method: "POST", Path: "/auth/tokens", Body: []byte(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"u","password":"p"}}},"scope":{"project":{"name":"x","domain":{"name":"Default"}}}}}`)},
		// a server answer with a misspelt field
		{Service: "compute", Method: "GET", Path: "/servers/x", Status: 200, RespBody: []byte(`{"server":{"id":"x","name":"n","status":"ACTIVE","adresses":{}}}`)},
		// a floating IP answer whose port_id is a number
		{Service: "network", Method: "POST", Path: "/v2.0/floatingips", Status: 201, RespBody: []byte(`{"floatingip":{"id":"f","port_id":7}}`)},
		// a token answer without X-Subject-Token
		{Service: "identity", Method: "POST", Path: "/auth/tokens", Status: 201, RespHeader: http.Header{}, RespBody: []byte(`{"token":{"methods":["password"],"catalog":[],"expires_at":"2099-01-01T00:00:00.000000Z"}}`)},
		// Nova's error answered in Neutron's shape
		{Service: "compute", Method: "GET", Path: "/servers/x", Status: 404, RespBody: []byte(`{"NeutronError":{"type":"x"}}`)},
	}
	for i, ex := range bad {
		if len(ex.Body) > 0 && ex.Status == 0 {
			if checkRequest(ex) == nil {
				t.Errorf("case %d: the request check passed %s", i, ex.Body)
			}
			continue
		}
		if checkResponse(ex) == nil {
			t.Errorf("case %d: the answer check passed %s", i, ex.RespBody)
		}
	}
}
