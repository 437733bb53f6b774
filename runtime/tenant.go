package runtime

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// tenantRE is a safe tenant id: it names a directory of the work root.
// (Its length is checked apart, as cooprName's.)
var tenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidTenant reports whether id is a safe tenant id: 1 to 64 letters,
// digits, '.', '_' or '-', starting with a letter or a digit.
func ValidTenant(id string) bool { return len(id) <= 64 && tenantRE.MatchString(id) }

// tenantRule says what ValidTenant accepts, for error messages.
const tenantRule = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or a digit"

// tenantOf is the task's tenant: its tenantId, else the runtime's.
func (rt *Runtime) tenantOf(t *Task) string {
	if t.TenantID != "" {
		return t.TenantID
	}
	return rt.opts.Tenant
}

// workDirFor is the Coopr working directory of a plugin type for a tenant.
func (rt *Runtime) workDirFor(pt *pluginType, tenant string) string {
	return filepath.Join(rt.workRoot, tenant, pt.family.Dir(), pt.name)
}

// namedTypes lists the plugin types of a family the task names: the
// provider in config.provider.providertype, the automators in
// config.automators and config.service.action.type.
func (t *Task) namedTypes(f Family) []string {
	var out []string
	if f == Provider {
		if t.route.Provider != nil && t.route.Provider.ProviderType != "" {
			out = append(out, t.route.Provider.ProviderType)
		}
		return out
	}
	out = append(out, t.route.Automators...)
	if t.route.Service != nil && t.route.Service.Action != nil && t.route.Service.Action.Type != "" {
		out = append(out, t.route.Service.Action.Type)
	}
	return out
}

// namedPaths are the local paths a task names for its hooks to read: the
// identity files of config["ssh-auth"] (any key containing "identityfile",
// as Coopr's set_credentials reads it).
func namedPaths(taskT *lua.LTable) []string {
	config, _ := taskT.RawGetString("config").(*lua.LTable)
	if config == nil {
		return nil
	}
	auth, _ := config.RawGetString("ssh-auth").(*lua.LTable)
	if auth == nil {
		return nil
	}
	var out []string
	auth.ForEach(func(k, v lua.LValue) {
		if s, ok := v.(lua.LString); ok && s != "" && strings.Contains(strings.ToLower(k.String()), "identityfile") {
			out = append(out, string(s))
		}
	})
	sort.Strings(out)
	return out
}

// grantsFor turns the paths a task names into read grants for a hook of
// pt running in workDir. A path is granted only when it lies in a resource
// folder that its plugin type declares (resourceTypes), that type is one
// the task names, and the folder is in the task's tenant. Coopr's
// identityfile values are absolute paths on the provisioner host
// (/var/coopr/.../work/<tenant>/providertypes/aws/ssh_keys/coopr.pem): the
// part from <tenant> on is mapped onto this work root. Paths inside the
// hook's own work dir or plugin folder need no grant.
func (rt *Runtime) grantsFor(snap *snapshot, task *Task, tenant, workDir, pluginDir string, named []string) []bindings.Grant {
	var out []bindings.Grant
	for _, n := range named {
		abs := n
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(workDir, abs)
		}
		abs = filepath.Clean(abs)
		if inside(workDir, abs) || (pluginDir != "" && inside(pluginDir, abs)) {
			continue
		}
		g := bindings.Grant{Named: n}
		path, why := rt.grantPath(snap, task, tenant, abs)
		if why != "" {
			g.Denied = fmt.Sprintf("config[\"ssh-auth\"] names %s, but %s; a hook reads another plugin's files only when they lie in a "+
				"resource folder its type declares (resourceTypes), of a type the task names, in the task's tenant", n, why)
		} else {
			g.Path = path
			// The owner's work dir: <work>/<tenant>/<family>types/<type>.
			rel, _ := filepath.Rel(rt.workRoot, path)
			segs := strings.SplitN(rel, string(filepath.Separator), 4)
			g.Root = filepath.Join(rt.workRoot, segs[0], segs[1], segs[2])
		}
		out = append(out, g)
	}
	return out
}

// inside reports whether p is dir or below it (both clean and absolute).
func inside(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// grantPath maps a named absolute path onto the work root and checks the
// rule; why says what breaks it.
func (rt *Runtime) grantPath(snap *snapshot, task *Task, tenant, abs string) (path, why string) {
	var segs []string
	if rel, err := filepath.Rel(rt.workRoot, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		segs = strings.Split(rel, string(filepath.Separator))
	} else {
		// Coopr's layout on another host: .../<tenant>/<family>types/<type>/...
		all := strings.Split(strings.TrimPrefix(abs, string(filepath.Separator)), string(filepath.Separator))
		for i := len(all) - 1; i >= 1; i-- {
			if all[i] == Provider.Dir() || all[i] == Automator.Dir() {
				segs = all[i-1:]
				break
			}
		}
		if segs == nil {
			return "", "it is neither under the work root nor in Coopr's layout (<work>/<tenant>/providertypes/<type>/<resource>/<file>)"
		}
	}
	if len(segs) < 4 {
		return "", "it is not inside a plugin type's resource folder (<tenant>/<providertypes|automatortypes>/<type>/<resource>/...)"
	}
	owner, famDir, typ, res := segs[0], segs[1], segs[2], segs[3]
	if owner != tenant {
		return "", fmt.Sprintf("it belongs to tenant %q, not to this task's tenant %q: tenants never see each other's files", owner, tenant)
	}
	var fam Family
	switch famDir {
	case Provider.Dir():
		fam = Provider
	case Automator.Dir():
		fam = Automator
	default:
		return "", fmt.Sprintf("%q is not providertypes or automatortypes", famDir)
	}
	namedByTask := false
	for _, n := range task.namedTypes(fam) {
		namedByTask = namedByTask || n == typ
	}
	if !namedByTask {
		return "", fmt.Sprintf("it is in the work dir of %s type %q, which this task does not name (it names %s types: %s)",
			fam, typ, fam, orNone(task.namedTypes(fam)))
	}
	pt, ok := snap.types[typ]
	if !ok || pt.family != fam {
		return "", fmt.Sprintf("no loaded %s type is called %q", fam, typ)
	}
	if _, ok := pt.def.ResourceTypes[res]; !ok {
		declared := make([]string, 0, len(pt.def.ResourceTypes))
		for r := range pt.def.ResourceTypes {
			declared = append(declared, r)
		}
		sort.Strings(declared)
		return "", fmt.Sprintf("%q is not a resource folder of %s (its resourceTypes: %s)", res, typ, orNone(declared))
	}
	return filepath.Join(append([]string{rt.workRoot}, segs...)...), ""
}
