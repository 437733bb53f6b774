// fakechef is a strict stand-in for chef-solo, installed as
// /opt/chef/bin/chef-solo on the test's sshd hosts. It runs nothing: it
// checks that it was called the way chef-solo's documentation describes
// (docs.chef.io, "chef-solo (executable)"), that its config names the
// dirs the resources were shipped to, that the JSON attributes are a JSON
// object, and that every item of the run list resolves as Chef would
// resolve it (roles from role_path, recipes in cookbooks with metadata,
// their dependencies), then records the run for the test and prints what
// chef-solo prints. Anything chef-solo would refuse makes it exit non-zero
// with chef's FATAL line.
//
// A recipe containing a line `raise "message"` fails the run as Chef does
// (RuntimeError), so tests can see a failure surface.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// RunsFile gets one JSON line per run ($FAKECHEF_RUNS overrides it).
const RunsFile = "/var/lib/fakechef/runs.jsonl"

var logLevels = []string{"auto", "trace", "debug", "info", "warn", "error", "fatal"}

// options chef-solo takes a value for, and flags it does not.
var valued = map[string]string{"-c": "config", "--config": "config", "-j": "json", "--json-attributes": "json",
	"-o": "override", "--override-runlist": "override", "-l": "log_level", "--log_level": "log_level",
	"-L": "logfile", "--logfile": "logfile", "-F": "format", "--format": "format", "-N": "node_name",
	"--node-name": "node_name", "-E": "environment", "--environment": "environment",
	"--run-lock-timeout": "run_lock_timeout", "--chef-license": "chef_license"}
var flags = map[string]bool{"--no-color": true, "--color": true, "-W": true, "--why-run": true, "--legacy-mode": true,
	"-z": true, "--local-mode": true, "--minimal-ohai": true, "--no-fork": true, "--fork": true}

type run struct {
	Argv       []string       `json:"argv"`
	UID        int            `json:"uid"`
	Config     string         `json:"config"`
	RunList    []string       `json:"run_list"`
	Recipes    []string       `json:"recipes"`
	Attributes map[string]any `json:"attributes"`
	Time       string         `json:"time"`
}

func fatal(format string, args ...any) {
	fmt.Printf("[%s] FATAL: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
	os.Exit(1)
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chef-solo: "+format+"\nUSAGE: chef-solo [options]\n", args...)
	os.Exit(2)
}

func main() {
	opts := map[string]string{}
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-v" || a == "--version" {
			fmt.Println("Chef: 12.21.3 (fakechef)")
			return
		}
		name, val, hasVal := strings.Cut(a, "=")
		if flags[a] {
			continue
		}
		key, ok := valued[name]
		if !ok {
			usage("invalid option: %s", a)
		}
		if !hasVal {
			if i+1 >= len(args) {
				usage("missing argument: %s", a)
			}
			i++
			val = args[i]
		}
		opts[key] = val
	}
	if lv, ok := opts["log_level"]; ok && !slices.Contains(logLevels, lv) {
		usage("invalid argument: -l %s (%s)", lv, strings.Join(logLevels, ", "))
	}
	if os.Geteuid() != 0 {
		fatal("fakechef: run as uid %d; the chef-solo automator runs chef-solo as root", os.Geteuid())
	}
	cfgPath := opts["config"]
	if cfgPath == "" {
		fatal("fakechef: no -c: the automator must name its solo.rb (/etc/chef/solo.rb is not its)")
	}
	cfg := readConfig(cfgPath)
	r := run{Argv: os.Args, UID: os.Geteuid(), Config: cfgPath, Time: time.Now().UTC().Format(time.RFC3339Nano)}

	// -j: a file holding a JSON object (Chef: "json_attributes must be a hash").
	jpath := opts["json"]
	if jpath == "" {
		fatal("fakechef: no -j: the automator passes Coopr's attributes with -j")
	}
	st, err := os.Stat(jpath)
	if err != nil || !st.Mode().IsRegular() {
		fatal("I cannot find %s", jpath)
	}
	if st.Mode().Perm()&0o077 != 0 {
		fatal("fakechef: %s is mode %v: the attributes (with the cluster's secrets) must be readable by root only", jpath, st.Mode().Perm())
	}
	data, _ := os.ReadFile(jpath)
	if err := json.Unmarshal(data, &r.Attributes); err != nil || r.Attributes == nil {
		fatal("Chef::Exceptions::JSON::ParseError: could not parse JSON attributes from %s: %v", jpath, err)
	}

	// -o replaces the run list; without it, the attributes' run_list.
	var items []string
	if o, ok := opts["override"]; ok {
		if o == "" {
			fatal("Chef::Exceptions::InvalidRunListItem: empty override run list")
		}
		items = strings.Split(o, ",")
	} else if rl, ok := r.Attributes["run_list"].([]any); ok {
		for _, x := range rl {
			items = append(items, fmt.Sprint(x))
		}
	}
	r.RunList = items
	seen := map[string]bool{}
	for _, it := range items {
		r.Recipes = append(r.Recipes, expand(cfg, it, seen, 0)...)
	}
	if len(r.Recipes) == 0 {
		fatal("fakechef: nothing to run: no -o and no run_list in the attributes")
	}
	checkDataBags(cfg)

	fmt.Println("Starting Chef Client, version 12.21.3 (fakechef)")
	fmt.Printf("Compiling Cookbooks...\nConverging %d resources\n", len(r.Recipes))
	for _, rec := range r.Recipes {
		fmt.Printf("Recipe: %s\n  * fakechef[%s] action run (up to date)\n", rec, rec)
		if msg := raised(cfg, rec); msg != "" {
			record(r)
			fmt.Printf("\n================================================================================\n"+
				"Recipe Compile Error in %s\n================================================================================\n\n"+
				"RuntimeError\n------------\n%s\n\n", rec, msg)
			fatal("RuntimeError: %s", msg)
		}
	}
	record(r)
	fmt.Printf("\nRunning handlers:\nRunning handlers complete\nChef Client finished, 0/%d resources updated in 01 seconds\n", len(r.Recipes))
}

type config struct {
	cookbooks []string
	dataBags  string
	roles     string
}

var cfgLine = regexp.MustCompile(`^(\w+)\s+(.+)$`)
var known = map[string]bool{"cookbook_path": true, "data_bag_path": true, "role_path": true, "environment_path": true,
	"file_cache_path": true, "log_level": true, "log_location": true, "node_name": true, "json_attribs": true,
	"ssl_verify_mode": true, "file_backup_path": true, "lockfile": true, "solo_legacy_mode": true, "local_mode": true}

// readConfig reads a solo.rb of `key "value"` and `key ["a", "b"]` lines.
func readConfig(path string) config {
	data, err := os.ReadFile(path)
	if err != nil {
		fatal("Chef::Exceptions::ConfigurationError: you specified a config file %s which is not readable: %v", path, err)
	}
	var c config
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := cfgLine.FindStringSubmatch(line)
		if m == nil || !known[m[1]] {
			fatal("Chef::Exceptions::ConfigurationError: %s:%d: unknown config line %q", path, n+1, line)
		}
		var vals []string
		if strings.HasPrefix(m[2], "[") {
			if json.Unmarshal([]byte(m[2]), &vals) != nil {
				fatal("Chef::Exceptions::ConfigurationError: %s:%d: %s is not a list of strings", path, n+1, m[1])
			}
		} else {
			var s string
			if json.Unmarshal([]byte(m[2]), &s) != nil {
				fatal("Chef::Exceptions::ConfigurationError: %s:%d: %s is not a string", path, n+1, m[1])
			}
			vals = []string{s}
		}
		for _, v := range vals {
			if !filepath.IsAbs(v) {
				fatal("Chef::Exceptions::ConfigurationError: %s:%d: %s %q is not absolute", path, n+1, m[1], v)
			}
		}
		switch m[1] {
		case "cookbook_path":
			c.cookbooks = vals
		case "data_bag_path":
			c.dataBags = vals[0]
		case "role_path":
			c.roles = vals[0]
		case "file_cache_path":
			if err := os.MkdirAll(vals[0], 0o755); err != nil {
				fatal("Chef::Exceptions::FileNotFound: file_cache_path %s: %v", vals[0], err)
			}
		}
	}
	if len(c.cookbooks) == 0 || c.roles == "" || c.dataBags == "" {
		fatal("fakechef: %s must set cookbook_path, role_path and data_bag_path (the shipped dirs)", path)
	}
	for _, d := range append(slices.Clone(c.cookbooks), c.roles, c.dataBags) {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			fatal("fakechef: %s names %s, which is not a directory on the node", path, d)
		}
	}
	return c
}

var (
	recipeItem = regexp.MustCompile(`^recipe\[([\w.-]+)(?:::([\w.-]+))?(?:@([\d.]+))?\]$`)
	roleItem   = regexp.MustCompile(`^role\[([\w.-]+)\]$`)
	bareItem   = regexp.MustCompile(`^([\w.-]+)(?:::([\w.-]+))?$`)
	depends    = regexp.MustCompile(`(?m)^\s*depends\s+['"]([\w.-]+)['"]`)
)

// expand resolves one run list item into recipes, as Chef's run list
// expansion does.
func expand(c config, item string, seen map[string]bool, depth int) []string {
	if depth > 20 {
		fatal("Chef::Exceptions::RoleNotFound: role nesting too deep at %s (a loop?)", item)
	}
	if m := roleItem.FindStringSubmatch(item); m != nil {
		if seen["role:"+m[1]] {
			return nil
		}
		seen["role:"+m[1]] = true
		p := filepath.Join(c.roles, m[1]+".json")
		data, err := os.ReadFile(p)
		if err != nil {
			fatal("Chef::Exceptions::RoleNotFound: Role %s (included by 'top level') not found in %s", m[1], c.roles)
		}
		var role struct {
			Name      string   `json:"name"`
			ChefType  string   `json:"chef_type"`
			JSONClass string   `json:"json_class"`
			RunList   []string `json:"run_list"`
		}
		if err := json.Unmarshal(data, &role); err != nil {
			fatal("Chef::Exceptions::JSON::ParseError: %s: %v", p, err)
		}
		if role.Name != m[1] || (role.ChefType != "" && role.ChefType != "role") || (role.JSONClass != "" && role.JSONClass != "Chef::Role") {
			fatal("Chef::Exceptions::InvalidRole: %s: name %q, chef_type %q, json_class %q", p, role.Name, role.ChefType, role.JSONClass)
		}
		var out []string
		for _, it := range role.RunList {
			out = append(out, expand(c, it, seen, depth+1)...)
		}
		return out
	}
	var cb, rec string
	if m := recipeItem.FindStringSubmatch(item); m != nil {
		cb, rec = m[1], m[2]
	} else if m := bareItem.FindStringSubmatch(item); m != nil {
		cb, rec = m[1], m[2]
	} else {
		fatal("ArgumentError: Unable to create Chef::RunList::RunListItem from %q: must be recipe[], role[] or a recipe name", item)
	}
	if rec == "" {
		rec = "default"
	}
	name := cb + "::" + rec
	if seen[name] {
		return nil
	}
	seen[name] = true
	dir := cookbook(c, cb)
	if _, err := os.Stat(filepath.Join(dir, "recipes", rec+".rb")); err != nil {
		fatal("Chef::Exceptions::RecipeNotFound: could not find recipe %s for cookbook %s", rec, cb)
	}
	var out []string
	meta, _ := os.ReadFile(filepath.Join(dir, "metadata.rb"))
	for _, d := range depends.FindAllStringSubmatch(string(meta), -1) {
		cookbook(c, d[1])
	}
	return append(out, name)
}

func cookbook(c config, name string) string {
	for _, p := range c.cookbooks {
		dir := filepath.Join(p, name)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			_, e1 := os.Stat(filepath.Join(dir, "metadata.rb"))
			_, e2 := os.Stat(filepath.Join(dir, "metadata.json"))
			if e1 != nil && e2 != nil {
				fatal("Chef::Exceptions::MetadataNotFound: No metadata.rb or metadata.json found for cookbook %s in %s", name, dir)
			}
			return dir
		}
	}
	fatal("Chef::Exceptions::CookbookNotFound: Cookbook %s not found. If you're loading %s from another cookbook, make sure you configure the dependency in your metadata", name, name)
	return ""
}

var itemID = regexp.MustCompile(`^[\-[:alnum:]_]+$`)

// checkDataBags reads every data bag item as chef-solo would load it.
func checkDataBags(c config) {
	bags, _ := os.ReadDir(c.dataBags)
	for _, b := range bags {
		if !b.IsDir() {
			continue
		}
		items, _ := os.ReadDir(filepath.Join(c.dataBags, b.Name()))
		for _, it := range items {
			if !strings.HasSuffix(it.Name(), ".json") {
				continue
			}
			p := filepath.Join(c.dataBags, b.Name(), it.Name())
			data, _ := os.ReadFile(p)
			var item map[string]any
			if err := json.Unmarshal(data, &item); err != nil {
				fatal("Chef::Exceptions::JSON::ParseError: data bag item %s: %v", p, err)
			}
			id, _ := item["id"].(string)
			if !itemID.MatchString(id) {
				fatal("Chef::Exceptions::InvalidDataBagItemID: Data Bag items must have an id matching %s, you gave: %q (%s)", itemID, id, p)
			}
		}
	}
}

var raise = regexp.MustCompile(`(?m)^\s*raise\s+["'](.*)["']\s*$`)

func raised(c config, recipe string) string {
	cb, rec, _ := strings.Cut(recipe, "::")
	data, _ := os.ReadFile(filepath.Join(cookbook(c, cb), "recipes", rec+".rb"))
	if m := raise.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

func record(r run) {
	path := RunsFile
	if p := os.Getenv("FAKECHEF_RUNS"); p != "" {
		path = p
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fatal("fakechef: %v", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fatal("fakechef: %v", err)
	}
	defer f.Close()
	b, _ := json.Marshal(r)
	f.Write(append(b, '\n'))
}
