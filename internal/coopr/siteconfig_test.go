package coopr_test

import (
	"os"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/coopr"
)

func siteFlags(t *testing.T, files ...string) ([][2]string, []string, error) {
	t.Helper()
	c := coopr.SiteConfig{}
	for i, f := range files {
		if err := c.Read(strings.NewReader(f), "file"+string(rune('1'+i))); err != nil {
			return nil, nil, err
		}
	}
	return c.Flags()
}

// TestSiteConfigFlags: Coopr's own provisioner-default.xml (verbatim,
// test/testdata/coopr) and a site file over it become loomd serve flags
// with Coopr's effective values; what has no flag is explained.
func TestSiteConfigFlags(t *testing.T) {
	defaults, err := os.ReadFile("../../test/testdata/coopr/provisioner-default.xml")
	if err != nil {
		t.Fatal(err)
	}
	flags, notes, err := siteFlags(t, string(defaults))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"--coopr-server", "http://localhost:55055"}, {"--coopr-listen", "0.0.0.0:55056"}, {"--coopr-capacity", "10"}}
	if len(flags) != len(want) {
		t.Fatalf("defaults: flags %v, want %v", flags, want)
	}
	for i := range want {
		if flags[i] != want[i] {
			t.Errorf("defaults: flag %d = %v, want %v", i, flags[i], want[i])
		}
	}
	all := strings.Join(notes, "\n")
	for _, w := range []string{"listens on every address", "provisioner.work.dir (/var/coopr/data/provisioner/work): give loomd a fresh --work-dir",
		"provisioner.data.dir (/var/coopr/data/provisioner/data) has no equivalent"} {
		if !strings.Contains(all, w) {
			t.Errorf("defaults: notes lack %q:\n%s", w, all)
		}
	}

	site := `<?xml version="1.0"?><configuration>
  <property><name>provisioner.server.uri</name><value>https://coopr.example:55055</value></property>
  <property><name>Provisioner.Bind.IP</name><value>10.0.0.5</value></property>
  <property><name>provisioner.register.ip</name><value>prov1.example</value></property>
  <property><name>provisioner.heartbeat.interval</name><value>30</value></property>
  <property><name>provisioner.worker.poll.interval</name><value>0.5</value></property>
  <property><name>provisioner.log.level</name><value>fatal</value></property>
  <property><name>provisioner.log.dir</name><value>/var/log/coopr</value></property>
  <property><name>provisioner.capacity</name><value></value></property>
  <property><name>trust.cert.path</name><value>/etc/coopr/prov.pem</value></property>
  <property><name>trust.cert.pass</name><value>secret</value></property>
  <property><name>provisioner.mystery</name><value>1</value></property>
</configuration>`
	flags, notes, err = siteFlags(t, string(defaults), site)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range flags {
		got[f[0]] = f[1]
	}
	for k, v := range map[string]string{"--coopr-server": "https://coopr.example:55055", "--coopr-listen": "10.0.0.5:55056",
		"--coopr-advertise": "prov1.example", "--coopr-heartbeat": "30s", "--coopr-poll": "0.5s", "--log-level": "error",
		"--coopr-cert": "/etc/coopr/prov.pem"} {
		if got[k] != v {
			t.Errorf("site: %s = %q, want %q (all: %v)", k, got[k], v, flags)
		}
	}
	if _, ok := got["--coopr-capacity"]; ok {
		t.Errorf("an empty value must unset the default: %v", flags)
	}
	all = strings.Join(notes, "\n")
	for _, w := range []string{"heartbeat every 10 s", "provisioner.log.dir", "trust.cert.pass: loomd reads unencrypted keys only",
		"provisioner.mystery: not a Coopr provisioner setting"} {
		if !strings.Contains(all, w) {
			t.Errorf("site: notes lack %q:\n%s", w, all)
		}
	}
	if strings.Contains(all, "secret") {
		t.Errorf("a note repeats the key passphrase:\n%s", all)
	}

	for _, tc := range []struct{ file, want string }{
		{`<configuration><property><name>provisioner.server.uri</name><value>http://SERVER_IP:SERVER_PORT</value></property></configuration>`, "provisioner.server.uri"},
		{`<configuration><property><name>provisioner.bind.port</name><value>x</value></property></configuration>`, "provisioner.bind.port"},
		{`<configuration><property><name>provisioner.log.level</name><value>loud</value></property></configuration>`, "provisioner.log.level"},
		{`<configuration><property><name>provisioner.worker.poll.interval</name><value>-1</value></property></configuration>`, "want a number of seconds"},
		{`<configuration><property><value>1</value></property></configuration>`, "has no <name>"},
		{`{"json": true}`, "not a Coopr configuration file"},
	} {
		if _, _, err := siteFlags(t, tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.file, err, tc.want)
		}
	}
}
