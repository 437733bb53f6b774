package provider

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// KlientInstallURL is where the mirror's cloud-init fetches Klient's
// installer (kloud's metadata package: DefaultEntrypointBaseURL).
const KlientInstallURL = "https://koding.com/s3/koding-klient/entrypoint/install.sh"

// KiteKeyPath is where the mirror's cloud-init writes the machine's kite
// key; Klient reads it to authenticate with Koding.
const KiteKeyPath = "/etc/kite/kite.key"

// BuildUserdata turns the machine resource vm, named name in the
// template, into one that installs Klient (userdata.go): its user-data
// field becomes a cloud-init that writes a fresh kite key per machine
// (count > 1 gives name.0, name.1 ...; the template reads them with
// ${lookup(var.kitekeys_<name>, count.index)}) and runs Klient's
// installer, then the user's own script. The koding_* attributes are
// consumed: koding_klient_timeout (how long kloud waits for Klient),
// koding_debug, koding_mounts, koding_always_on (stored in the
// machine's meta).
//
// kloud builds the cloud-init with its metadata package (a Konfig with
// Koding's endpoints, merged with a user cloud-config); the mirror's is
// smaller and keeps a user cloud-config as a script file.
func (bs *BaseStack) BuildUserdata(name string, vm map[string]interface{}) error {
	t := bs.Builder.Template
	count := 1
	if n, ok := vm["count"].(int); ok && n > 1 {
		count = n
	}
	if s, ok := vm["koding_klient_timeout"].(string); ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New(`unable to read "koding_klient_timeout": ` + err.Error())
		}
		if bs.Planner != nil {
			bs.Planner.KlientTimeout = d
		}
		delete(vm, "koding_klient_timeout")
	}
	var labels []string
	if count > 1 {
		for i := 0; i < count; i++ {
			labels = append(labels, fmt.Sprintf("%s.%d", name, i))
		}
	} else {
		labels = []string{name}
	}
	if b, ok := vm["koding_debug"].(bool); ok {
		bs.Debug = b
		delete(vm, "koding_debug")
	}
	mounts := ""
	if v, ok := vm["koding_mounts"]; ok {
		mounts = fmt.Sprint(v)
		delete(vm, "koding_mounts")
	}
	var meta map[string]interface{}
	if b, ok := vm["koding_always_on"].(bool); ok {
		meta = map[string]interface{}{"alwaysOn": b}
		delete(vm, "koding_always_on")
	}
	field := bs.Provider.userdata()
	user, _ := vm[field].(string)
	keyName := "kitekeys_" + name
	vm[field] = cloudInit("${lookup(var."+keyName+", count.index)}", user, bs.Debug, mounts)

	keys := make(map[string]interface{}, count)
	for i, label := range labels {
		username := ""
		if bs.Req != nil {
			username = bs.Req.Username
		}
		key, err := bs.BuildKiteKey(label, username)
		if err != nil {
			return err
		}
		keys[fmt.Sprint(i)] = key
		if len(meta) != 0 {
			if bs.Metas == nil {
				bs.Metas = make(map[string]map[string]interface{})
			}
			bs.Metas[label] = meta
		}
	}
	if t.Variable == nil {
		t.Variable = make(map[string]interface{})
	}
	t.Variable[keyName] = map[string]interface{}{"default": keys}
	return nil
}

// cloudInit is the mirror's Klient cloud-config.
func cloudInit(kiteKey, user string, debug bool, mounts string) string {
	var b strings.Builder
	b.WriteString("#cloud-config\nwrite_files:\n")
	b.WriteString("  - path: " + KiteKeyPath + "\n    permissions: \"0600\"\n    content: " + kiteKey + "\n")
	if user != "" {
		b.WriteString("  - path: /var/lib/koding/user-data\n    permissions: \"0755\"\n    content: |\n")
		lines := strings.Split(strings.TrimRight(user, "\n"), "\n")
		for _, l := range lines {
			b.WriteString("      " + l + "\n")
		}
	}
	b.WriteString("runcmd:\n")
	env := []string{}
	if debug {
		env = append(env, "KLIENT_DEBUG=1")
	}
	if mounts != "" {
		env = append(env, "KLIENT_MOUNTS="+mounts)
	}
	sort.Strings(env)
	prefix := ""
	if len(env) > 0 {
		prefix = strings.Join(env, " ") + " "
	}
	b.WriteString("  - [sh, -c, \"" + prefix + "curl -fsSL " + KlientInstallURL + " | sh\"]\n")
	if user != "" {
		b.WriteString("  - [/var/lib/koding/user-data]\n")
	}
	return b.String()
}
