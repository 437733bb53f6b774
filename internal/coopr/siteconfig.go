package coopr

import (
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// SiteConfig is a Coopr provisioner configuration: the properties of its
// Hadoop-style XML files (provisioner-default.xml, provisioner-site.xml),
// later files overriding earlier ones, names compared in lower case, an
// empty value meaning unset, as Coopr read them (reference §8).
type SiteConfig map[string]string

// Read reads one file into c; name is for error messages.
func (c SiteConfig) Read(r io.Reader, name string) error {
	var doc struct {
		XMLName    xml.Name `xml:"configuration"`
		Properties []struct {
			Name  string `xml:"name"`
			Value string `xml:"value"`
		} `xml:"property"`
	}
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return fmt.Errorf("%s: not a Coopr configuration file (<configuration><property><name/><value/></property>...): %w", name, err)
	}
	for i, p := range doc.Properties {
		key := strings.ToLower(strings.TrimSpace(p.Name))
		if key == "" {
			return fmt.Errorf("%s: property %d has no <name>", name, i+1)
		}
		if v := strings.TrimSpace(p.Value); v == "" {
			delete(c, key)
		} else {
			c[key] = v
		}
	}
	return nil
}

// Flags maps the configuration onto `loomd serve` flags (flag, value
// pairs in a stable order) and notes on what has no flag or behaves
// differently. It keeps Coopr's effective values: the provisioner API
// listens where Coopr's did (0.0.0.0:55056 unless configured), because
// the server already calls it there.
func (c SiteConfig) Flags() (flags [][2]string, notes []string, err error) {
	seen := map[string]bool{}
	get := func(k string) (string, bool) {
		seen[k] = true
		v, ok := c[k]
		return v, ok
	}
	seconds := func(key string) (string, error) {
		v, _ := get(key)
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			return "", fmt.Errorf("%s = %q: want a number of seconds", key, v)
		}
		return strconv.FormatFloat(n, 'f', -1, 64) + "s", nil
	}

	server, ok := get("provisioner.server.uri")
	if !ok {
		server = "http://localhost:55055" // Coopr's default
	}
	if u, err := url.Parse(server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("provisioner.server.uri = %q: want http://host:port or https://host:port (the server's internal port, 55055 by default)", server)
	}
	flags = append(flags, [2]string{"--coopr-server", server})
	ip, ok := get("provisioner.bind.ip")
	if !ok {
		ip = "0.0.0.0"
	}
	port, ok := get("provisioner.bind.port")
	if !ok {
		port = "55056"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, nil, fmt.Errorf("provisioner.bind.port = %q: want a port number", port)
	}
	flags = append(flags, [2]string{"--coopr-listen", net.JoinHostPort(ip, port)})
	if ip == "0.0.0.0" || ip == "::" {
		notes = append(notes, "the provisioner API listens on every address, as Coopr's did: it has no authentication, so keep it on a network only the Coopr server reaches (loomd's own default is 127.0.0.1)")
	}
	if v, ok := get("provisioner.register.ip"); ok {
		flags = append(flags, [2]string{"--coopr-advertise", v})
	}
	if v, ok := get("provisioner.capacity"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			return nil, nil, fmt.Errorf("provisioner.capacity = %q: want a whole number, 1 or more", v)
		}
		flags = append(flags, [2]string{"--coopr-capacity", v})
	}
	if _, ok := get("provisioner.heartbeat.interval"); ok {
		v, err := seconds("provisioner.heartbeat.interval")
		if err != nil {
			return nil, nil, err
		}
		if v != "10s" {
			flags = append(flags, [2]string{"--coopr-heartbeat", v})
			notes = append(notes, "provisioner.heartbeat.interval: Coopr ignored it and sent a heartbeat every 10 s; loomd honours --coopr-heartbeat (the server drops a provisioner silent for 120 s)")
		}
	}
	if _, ok := get("provisioner.worker.poll.interval"); ok {
		v, err := seconds("provisioner.worker.poll.interval")
		if err != nil {
			return nil, nil, err
		}
		if v != "1s" {
			flags = append(flags, [2]string{"--coopr-poll", v})
		}
	}
	if v, ok := get("provisioner.worker.poll.error.interval"); ok && v != "10" {
		notes = append(notes, "provisioner.worker.poll.error.interval: loomd backs off after errors from --coopr-poll up to 10 s; there is no flag")
	}
	if v, ok := get("provisioner.work.dir"); ok {
		notes = append(notes, fmt.Sprintf("provisioner.work.dir (%s): give loomd a fresh --work-dir rather than Coopr's, whose resource links point into Coopr's data dir (loomd's sandbox does not follow links out of the work dir); the layout is the same, the server syncs the resources again, and identityfile paths naming Coopr's work dir are mapped onto loomd's", v))
	}
	if v, ok := get("provisioner.data.dir"); ok {
		notes = append(notes, fmt.Sprintf("provisioner.data.dir (%s) has no equivalent: resource versions live in the work dir; give loomd a --data dir of its own for its queue and undelivered results", v))
	}
	if v, ok := get("provisioner.log.level"); ok {
		lvl := strings.ToLower(v)
		switch lvl {
		case "fatal":
			lvl = "error"
		case "debug", "info", "warn", "error":
		default:
			return nil, nil, fmt.Errorf("provisioner.log.level = %q: want debug, info, warn, error or fatal", v)
		}
		if lvl != "info" {
			flags = append(flags, [2]string{"--log-level", lvl})
		}
	}
	if _, ok := get("provisioner.log.dir"); ok {
		notes = append(notes, "provisioner.log.dir: loomd logs to stderr (--log-format json for collectors); let journald or your supervisor keep and rotate it")
	}
	for _, k := range []string{"provisioner.log.rotation.shift.age", "provisioner.log.rotation.shift.size"} {
		get(k) // rotation belongs to whoever keeps the log
	}
	if v, ok := get("provisioner.daemonize"); ok && strings.ToLower(v) != "false" {
		notes = append(notes, "provisioner.daemonize: loomd stays in the foreground; run it under systemd or another supervisor")
	}
	if v, ok := get("trust.cert.path"); ok {
		flags = append(flags, [2]string{"--coopr-cert", v})
		if !strings.HasPrefix(server, "https://") {
			notes = append(notes, "trust.cert.path is set but provisioner.server.uri is not https://: loomd refuses a client certificate toward a plain-HTTP server")
		}
	}
	if _, ok := get("trust.cert.pass"); ok {
		notes = append(notes, "trust.cert.pass: loomd reads unencrypted keys only; decrypt the key once (openssl pkey -in CERT.pem -out key.pem), keep it mode 0600, and add --coopr-key key.pem")
	}
	var unknown []string
	for k := range c {
		if !seen[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		notes = append(notes, k+": not a Coopr provisioner setting loomd knows; ignored")
	}
	return flags, notes, nil
}

// ServeCommand is the loomd serve command line of flags, one flag a line,
// each value quoted for a POSIX shell when it needs it: the values come
// from a configuration file, and the operator pastes the line into a shell.
func ServeCommand(flags [][2]string) string {
	var b strings.Builder
	b.WriteString("loomd serve")
	for _, f := range flags {
		fmt.Fprintf(&b, " \\\n    %s %s", f[0], shellWord(f[1]))
	}
	return b.String()
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
