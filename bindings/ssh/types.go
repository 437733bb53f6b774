package ssh

import "github.com/loomrt/loom/bindings"

// Field types shared by several classes.
const (
	durationType = "number|string" // seconds, or "30s"
	sizeType     = "number|string" // bytes, or "4MiB"
	sudoType     = "boolean|ssh.SudoOptions"
)

// connectOptions is ssh.connect's table; parseConnConfig reads it.
var connectOptions = bindings.TypeSpec{
	Name:  "ssh.ConnectOptions",
	Doc:   "ssh.connect's options (also a jump host's). Durations are seconds or strings like \"30s\".",
	Exact: true,
	Fields: []bindings.FieldSpec{
		{Name: "host", Type: "string", Doc: "host name or address (required)"},
		{Name: "port", Type: "integer", Optional: true, Doc: "TCP port (22)"},
		{Name: "user", Type: "string", Doc: "login user (required)"},
		{Name: "password", Type: "string", Optional: true, Doc: "password (a secret)"},
		{Name: "key", Type: "string", Optional: true, Doc: "private key as PEM or OpenSSH text (a secret); not with key_file"},
		{Name: "key_file", Type: "string", Optional: true, Doc: "private key file: own work dir, plugin folder or a resource the task names"},
		{Name: "passphrase", Type: "string", Optional: true, Doc: "the key's passphrase (a secret)"},
		{Name: "cert", Type: "string", Optional: true, Doc: "OpenSSH user certificate line for the key"},
		{Name: "host_key", Type: "ssh.HostKeyOptions", Optional: true, Doc: "host-key policy (strict: known_hosts)"},
		{Name: "jump", Type: "ssh.ConnectOptions", Optional: true, Doc: "a bastion to connect through (up to 4 deep)"},
		{Name: "connect_timeout", Type: durationType, Optional: true, Doc: "TCP connect timeout (10s)"},
		{Name: "handshake_timeout", Type: durationType, Optional: true, Doc: "SSH handshake timeout (15s)"},
		{Name: "keepalive", Type: durationType, Optional: true, Doc: "keepalive interval (15s)"},
		{Name: "keepalive_max", Type: "integer", Optional: true, Doc: "unanswered keepalives before the connection is dropped (3)"},
		{Name: "reuse", Type: "boolean", Optional: true, Doc: "share a pooled connection (true); false gives a private one closed by conn:close()"},
	},
}

// types are loom.ssh's classes, referenced from moduleSpec.
var types = []bindings.TypeSpec{
	{
		Name:    "ssh.Conn",
		Doc:     "A connection handle from ssh.connect or ssh.from_input.",
		Methods: "conn",
		Aliases: []string{"ssh.conn", "loom_ssh_conn"},
	},
	connectOptions,
	connectOptions.Optional("ssh.ConnectOverrides", "ssh.from_input's opts: any ssh.connect option, overriding what the task gives."),
	{
		Name:  "ssh.HostKeyOptions",
		Doc:   "How the server's host key is verified.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "policy", Type: `"strict"|"pinned"|"tofu"|"insecure"`, Optional: true, Doc: "strict (known_hosts), or pinned when pinned is given; tofu and insecure need the daemon's consent"},
			{Name: "pinned", Type: "string|string[]", Optional: true, Doc: `accepted keys: "SHA256:..." fingerprints, key lines or base64 blobs`},
			{Name: "known_hosts", Type: "string|string[]", Optional: true, Doc: "known_hosts files to check against"},
		},
	},
	{
		Name:  "ssh.KeyscanOptions",
		Doc:   "ssh.keyscan's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "host", Type: "string", Doc: "host name or address (required)"},
			{Name: "port", Type: "integer", Optional: true, Doc: "TCP port (22)"},
			{Name: "timeout", Type: durationType, Optional: true, Doc: "overall timeout (10s)"},
		},
	},
	{
		Name:  "ssh.WaitHostKeysOptions",
		Doc:   "ssh.wait_host_keys' options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "host", Type: "string", Doc: "host name or address (required)"},
			{Name: "port", Type: "integer", Optional: true, Doc: "TCP port (22)"},
			{Name: "timeout", Type: durationType, Optional: true, Doc: "the whole wait, ending at the latest 5s before the hook's deadline (300s; 0: one attempt)"},
			{Name: "interval", Type: durationType, Optional: true, Doc: "pause between attempts (5s)"},
			{Name: "attempt_timeout", Type: durationType, Optional: true, Doc: "timeout of each keyscan (10s)"},
		},
	},
	{
		Name: "ssh.HostKeys",
		Doc:  "Host keys as base64 blobs; the types a server lacks are absent.",
		Fields: []bindings.FieldSpec{
			{Name: "ed25519", Type: "string", Optional: true, Doc: "ssh-ed25519 key"},
			{Name: "ecdsa", Type: "string", Optional: true, Doc: "ecdsa-sha2-nistp256 key"},
			{Name: "rsa", Type: "string", Optional: true, Doc: "ssh-rsa key"},
		},
	},
	{
		Name:  "ssh.SudoOptions",
		Doc:   "Run as another user through sudo; sudo = true means {user = \"root\"}.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "user", Type: "string", Optional: true, Doc: "target user (root)"},
			{Name: "password", Type: "string", Optional: true, Doc: "sudo password, written only at sudo's prompt (a secret); without it sudo -n"},
		},
	},
	{
		Name:  "ssh.ExecOptions",
		Doc:   "conn:exec's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "check", Type: "boolean", Optional: true, Doc: "raise \"command\" on a non-zero exit, \"timeout\" on a timeout (false)"},
			{Name: "timeout", Type: durationType, Optional: true, Doc: "command timeout (none; the hook deadline always applies)"},
			{Name: "kill_grace", Type: durationType, Optional: true, Doc: "wait between TERM and KILL of a stopped command (5s)"},
			{Name: "env", Type: "table<string, string>", Optional: true, Doc: "environment (Setenv, else an export prefix)"},
			{Name: "stdin", Type: "string", Optional: true, Doc: "standard input"},
			{Name: "pty", Type: "boolean", Optional: true, Doc: "allocate a terminal; merges stderr into stdout (false)"},
			{Name: "sudo", Type: sudoType, Optional: true, Doc: "run through sudo"},
			{Name: "shell", Type: "string", Optional: true, Doc: "the shell that runs cmd (the login shell; sh under sudo)"},
			{Name: "login_env", Type: "boolean", Optional: true, Doc: "through sudo, give the command the login user's environment back, as sudo -E would (false)"},
			{Name: "on_stdout", Type: "fun(line: string)", Optional: true, Doc: "called with each line of stdout"},
			{Name: "on_stderr", Type: "fun(line: string)", Optional: true, Doc: "called with each line of stderr"},
			{Name: "max_capture", Type: sizeType, Optional: true, Doc: "captured bytes per stream (\"4MiB\"); the rest is drained and counted"},
			{Name: "cleanup", Type: "string", Optional: true, Doc: "shell code run on the node after a stopped command is dead"},
		},
	},
	{
		Name: "ssh.ExecResult",
		Doc:  "What conn:exec returns.",
		Fields: []bindings.FieldSpec{
			{Name: "stdout", Type: "string", Doc: "captured standard output"},
			{Name: "stderr", Type: "string", Doc: "captured standard error"},
			{Name: "exit_code", Type: "integer", Doc: "exit status"},
			{Name: "signal", Type: "string", Optional: true, Doc: "the signal that ended the command, if any"},
			{Name: "timed_out", Type: "boolean", Doc: "the timeout stopped the command"},
			{Name: "stopped", Type: "string", Optional: true, Doc: "what was killed when the command was stopped"},
			{Name: "truncated", Type: "boolean", Doc: "output beyond max_capture was dropped"},
			{Name: "duration_ms", Type: "integer", Doc: "run time in milliseconds"},
			{Name: "ok", Type: "boolean", Doc: "exit_code == 0 and not timed out"},
		},
	},
	{
		Name:  "ssh.UploadOptions",
		Doc:   "conn:upload's and conn:write's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "mode", Type: "string", Optional: true, Doc: "octal mode like \"0640\" (the existing file's, else 0644)"},
			{Name: "owner", Type: "string", Optional: true, Doc: "chown to this user"},
			{Name: "group", Type: "string", Optional: true, Doc: "chgrp to this group"},
			{Name: "sudo", Type: sudoType, Optional: true, Doc: "stage in a private temp file, then a root shell installs it"},
			{Name: "atomic", Type: "boolean", Optional: true, Doc: "write a temp file in the same dir, then rename over the target (true)"},
		},
	},
	{
		Name:  "ssh.UploadDirOptions",
		Doc:   "conn:upload_dir's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "method", Type: `"auto"|"tar"|"sftp"`, Optional: true, Doc: "auto: a tar stream when the host has tar, else SFTP (auto)"},
			{Name: "owner", Type: "string", Optional: true, Doc: "chown -R to this user afterwards"},
			{Name: "group", Type: "string", Optional: true, Doc: "chgrp -R to this group afterwards"},
			{Name: "sudo", Type: sudoType, Optional: true, Doc: "extract as another user (method tar only)"},
			{Name: "follow_links", Type: "boolean", Optional: true, Doc: "send what symlinks point to instead of the links (false)"},
			{Name: "after", Type: "string", Optional: true, Doc: "shell code run once the trees are in place; a non-zero exit raises \"command\""},
		},
	},
	{
		Name:  "ssh.DownloadOptions",
		Doc:   "conn:download's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "max_size", Type: sizeType, Optional: true, Doc: "largest file accepted (\"1GiB\")"},
			{Name: "mode", Type: "string", Optional: true, Doc: "octal mode of the local file (\"0644\")"},
		},
	},
	{
		Name:  "ssh.ReadOptions",
		Doc:   "conn:read's options.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "max_size", Type: sizeType, Optional: true, Doc: "largest file accepted (\"16MiB\"); larger raises \"io\""},
			{Name: "sudo", Type: sudoType, Optional: true, Doc: "read through sudo cat"},
		},
	},
	{
		Name: "ssh.TransferResult",
		Doc:  "What conn:upload, conn:write, conn:download and conn:upload_dir return.",
		Fields: []bindings.FieldSpec{
			{Name: "bytes", Type: "integer", Doc: "bytes copied"},
			{Name: "duration_ms", Type: "integer", Doc: "copy time in milliseconds"},
			{Name: "files", Type: "integer", Optional: true, Doc: "upload_dir: regular files sent"},
			{Name: "dirs", Type: "integer", Optional: true, Doc: "upload_dir: directories sent"},
			{Name: "links", Type: "integer", Optional: true, Doc: "upload_dir: symlinks sent"},
			{Name: "method", Type: `"tar"|"sftp"`, Optional: true, Doc: "upload_dir: how the trees travelled"},
		},
	},
}
