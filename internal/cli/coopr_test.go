package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loomd coopr flags prints a serve command line (values quoted for the
// shell) and explains the rest on stderr; bad files are usage errors.
func TestCooprFlagsCommand(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "provisioner-site.xml")
	os.WriteFile(site, []byte(`<configuration>
  <property><name>provisioner.server.uri</name><value>http://coopr:55055</value></property>
  <property><name>provisioner.register.ip</name><value>my host</value></property>
</configuration>`), 0o644)
	var out, errb bytes.Buffer
	if c := testApp(nil, &out, &errb).Execute([]string{"coopr", "flags", site}); c != 0 {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	want := "loomd serve \\\n    --coopr-server http://coopr:55055 \\\n    --coopr-listen 0.0.0.0:55056 \\\n    --coopr-advertise 'my host'\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errb.String(), "note: the provisioner API listens on every address") {
		t.Errorf("stderr: %s", errb.String())
	}
	for _, args := range [][]string{{"coopr", "flags"}, {"coopr", "flags", filepath.Join(dir, "missing.xml")}} {
		errb.Reset()
		if c := testApp(nil, &bytes.Buffer{}, &errb).Execute(args); c != ExitUsage || errb.Len() == 0 {
			t.Errorf("%v: exit %d, want %d with a message (%q)", args, c, ExitUsage, errb.String())
		}
	}
}
