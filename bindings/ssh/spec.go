package ssh

import "github.com/loomrt/loom/bindings"

// moduleSpec documents loom.ssh as data (binding reference, LuaLS stubs,
// REPL completion). docs/bindings/ssh.md is the long form.
var moduleSpec = bindings.ModuleSpec{
	Name: "ssh",
	Doc: "Pooled SSH connections with strict host-key checking, bounded command execution and file transfer. " +
		"Connections are shared across hooks and tasks per (host, port, user, credentials, host-key policy, jump chain). " +
		"Errors are tables {kind=, message=, host=, port=, user=, ...} with kind config, permission, connect, auth, host_key, " +
		"timeout, transport_lost, command or io.",
	Types: types,
	Funcs: []bindings.FuncSpec{
		{
			Name:    "connect",
			Params:  []string{"opts ssh.ConnectOptions"},
			Returns: []string{"ssh.Conn"},
			Doc: "Opens (or reuses) a pooled connection and returns a handle. opts: host (required), port (22), user (required); " +
				"password, or key (PEM text) or key_file (path relative to the work dir; see Local paths: own work dir, plugin folder, or a resource the task names), " +
				"passphrase, cert (OpenSSH user certificate line); host_key = {policy = \"strict\"|\"pinned\"|\"tofu\"|\"insecure\", " +
				"pinned = {\"SHA256:...\" | key line | base64 blob, ...}, known_hosts = path | {paths}}; jump = {same fields, for a bastion}; " +
				"connect_timeout (10s), handshake_timeout (15s), keepalive (15s), keepalive_max (3); reuse (true; false gives a private " +
				"connection closed by conn:close() or when the task ends, at most 16 per task by default: limits.connections). A handle ends with the task that opened it. Durations are seconds or strings like \"30s\". Passwords, keys and passphrases are " +
				"registered as secrets. Raises config, permission (tofu/insecure not enabled, path outside the roots), connect, auth, " +
				"host_key (shows both fingerprints on a mismatch), timeout, or limit (the task's private connections, the pool's maximum, " +
				"the worker's file descriptors).",
		},
		{
			Name:    "from_input",
			Params:  []string{"input LoomAutomatorInput|table", "task? table", "opts? ssh.ConnectOverrides"},
			Returns: []string{"ssh.Conn"},
			Doc: "Connects to an automator hook's host the Coopr way: host from input.ipaddress (else task.config.ipaddresses.access_v4), " +
				"user/password/identityfile/port from input.sshauth (else task.config[\"ssh-auth\"]; user defaults to task.config.sshuser, " +
				"then root), and host keys pinned from task.config.ssh_host_keys ({rsa=, ed25519=, ecdsa=} base64 blobs). opts may " +
				"override any ssh.connect field; its host_key is merged with the task's pins.",
		},
		{
			Name:    "keyscan",
			Params:  []string{"opts ssh.KeyscanOptions"},
			Returns: []string{"ssh.HostKeys"},
			Doc: "Returns the host keys a server presents as {ed25519=, ecdsa=, rsa=} base64 blobs (types it lacks are absent). " +
				"opts: host (required), port (22), timeout (10s). Unverified by nature: use it where the provider vouches for the host " +
				"(a CONFIRM hook right after creation) and record the result as result.ssh_host_keys so automators pin it. " +
				"Raises connect or timeout when no key could be read.",
		},
		{
			Name:    "wait_host_keys",
			Params:  []string{"opts ssh.WaitHostKeysOptions"},
			Returns: []string{"ssh.HostKeys|nil", "string|nil"},
			Doc: "Waits for a new machine's sshd and returns its host keys, as ssh.keyscan does: a keyscan every interval until one " +
				"answers or the budget is spent. opts: host (required), port (22), timeout (300s: the whole budget, ending at the latest 5s " +
				"before the hook's deadline so the hook can still return; 0 makes one attempt), interval (5s between attempts), attempt_timeout (10s per keyscan). When sshd never " +
				"answered it returns nil and a message naming host:port, how long it waited, the number of attempts and the last error, " +
				"so a CONFIRM can succeed with a warning. Raises config on bad options and cancelled (at once) when the task is cancelled.",
		},
		{
			Name:    "quote",
			Params:  []string{"...string|number|string[]"},
			Returns: []string{"string"},
			Doc:     "Quotes each argument as one POSIX shell word and joins them with spaces: ssh.quote(\"it's\") == [['it'\\''s']].",
		},
		{
			Name:    "conn:exec",
			Params:  []string{"cmd string", "opts? ssh.ExecOptions"},
			Returns: []string{"ssh.ExecResult"},
			Doc: "Runs a shell command and returns {stdout, stderr, exit_code, signal, timed_out, stopped, truncated, duration_ms, ok}. " +
				"A non-zero exit is data unless opts.check = true, which raises kind \"command\" with command, stdout, stderr, exit_code " +
				"(and \"timeout\" when timed out). opts: timeout (none; the hook deadline always applies), kill_grace (5s), " +
				"env = {NAME = value} (Setenv, else an export prefix), stdin (string), pty (false; merges stderr into stdout), " +
				"sudo = true | {user = \"root\", password = ...} (sudo -n without a password; with one, the password is written " +
				"only when sudo prompts with a random marker and never reaches output), shell (the login shell, as sshd runs a command; sh under sudo; \"/bin/sh\" " +
				"skips a second start of a login shell with slow rc files), login_env (false; with sudo, the login user's " +
				"environment as sudo -E gives it, read in the same session), on_stdout / on_stderr = function(line) " +
				"callbacks, max_capture (\"4MiB\" per stream; the rest is drained and counted, truncated = true), cleanup (shell code run " +
				"on the node, as the same user, after a stopped command is dead: task files it could not remove). The command runs in a " +
				"process group of its own; on timeout, hook deadline or cancellation (kind \"cancelled\"), a second session sends the " +
				"whole group TERM, then KILL after kill_grace, as root and through sudo too: no process is left behind, and stopped " +
				"says what was killed. A dropped connection raises \"transport_lost\" (the command is never re-run); sudo refusals " +
				"raise \"auth\" or \"permission\".",
		},
		{
			Name:    "conn:upload",
			Params:  []string{"local string", "remote string", "opts? ssh.UploadOptions"},
			Returns: []string{"ssh.TransferResult"},
			Doc: "Copies a local file (relative to the work dir; own work dir, plugin folder or a resource the task names) to an absolute remote " +
				"path over SFTP and returns {bytes, duration_ms}. opts: mode (\"0640\"; default: the existing file's, else 0644), " +
				"owner, group, sudo (true | {user=, password=}: stage in a private temp file, then a root shell installs it), " +
				"atomic (true: temp file in the same dir, chmod/chown, then rename over the target).",
		},
		{
			Name:    "conn:upload_dir",
			Params:  []string{"local string|table<string, string>", "remote string", "opts? ssh.UploadDirOptions"},
			Returns: []string{"ssh.TransferResult"},
			Doc: "Copies a local directory tree into a remote directory (created if missing) and returns {files, dirs, links, bytes, " +
				"method, duration_ms}. local may be a table {name = local dir, ...}: every tree goes in the same stream, into " +
				"remote/<name>. Modes and mtimes are kept; symlinks travel as symlinks and are never followed, unless follow_links " +
				"is true (tar -h: a link travels as the file or tree it points to, which must be readable by the hook: its work " +
				"dir, its plugin folder or a resource the task names; a cycle raises \"io\"). opts: method " +
				"(\"auto\": a tar stream into `tar -x` over one exec, SFTP with 8 files in flight when the host has no tar; \"tar\"; " +
				"\"sftp\"), owner, group (chown -R afterwards), sudo (tar only), after (shell code run once the trees are in place, " +
				"in the same exec and as the same user, stdin /dev/null; a non-zero exit raises \"command\" with its stdout, stderr " +
				"and exit_code).",
		},
		{
			Name:    "conn:download",
			Params:  []string{"remote string", "local string", "opts? ssh.DownloadOptions"},
			Returns: []string{"ssh.TransferResult"},
			Doc: "Copies a remote file to a local path (created atomically, parent dirs made, inside the hook's own work dir " +
				"only) and returns {bytes, duration_ms}. opts: max_size (\"1GiB\"), mode (\"0644\").",
		},
		{
			Name:    "conn:write",
			Params:  []string{"remote string", "content string", "opts? ssh.UploadOptions"},
			Returns: []string{"ssh.TransferResult"},
			Doc:     "Writes a string to a remote file; same options and result as conn:upload.",
		},
		{
			Name:    "conn:read",
			Params:  []string{"remote string", "opts? ssh.ReadOptions"},
			Returns: []string{"string"},
			Doc:     "Returns a remote file's content. opts: max_size (\"16MiB\"; larger files raise \"io\"), sudo (read through sudo cat).",
		},
		{
			Name:    "conn:close",
			Params:  nil,
			Returns: nil,
			Doc: "Ends the handle. A pooled connection stays open for the next hook or task (it closes after the idle timeout); " +
				"a private one (reuse = false) is closed now (else when the task ends).",
		},
	},
}
