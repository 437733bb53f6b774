package runtime

import (
	"fmt"
)

// The families of the called kinds.
const (
	ClusterDriver     Family = "clusterdriver"
	BucketProvisioner Family = "bucketprovisioner"
	CloudProvider     Family = "cloudprovider"
	KloudProvider     Family = "kloudprovider"
)

// kindTable holds the six kinds. It is built once and never modified.
var kindTable = []*Kind{providerKind(), automatorKind(), clusterDriverKind(), bucketProvisionerKind(), cloudProviderKind(), kloudProviderKind()}

// unimplemented is the absent behaviour of hooks whose contract answers
// with an error when the plugin cannot do the operation.
func unimplemented(message string) func(map[string]any, func(string) bool) (any, *CallError) {
	return func(map[string]any, func(string) bool) (any, *CallError) {
		return nil, &CallError{Class: ClassTerminal, Reason: ReasonUnimplemented, Message: message}
	}
}

// answer is the absent behaviour of hooks whose contract has a fixed
// answer (an empty message, success).
func answer(v func() any) func(map[string]any, func(string) bool) (any, *CallError) {
	return func(map[string]any, func(string) bool) (any, *CallError) { return v(), nil }
}

func nothing() any { return nil }

const cooprAbsent = "the task fails with \"unimplemented <hook> in <classname>\", as Coopr's base classes did; `loomd plugins check` warns"

var cooprResult = sOpen(
	opt("status", sInt("0 on success; 201/202 tell a Coopr server nothing was created")),
	opt("message", sString("what happened, for a person")),
	opt("result", sOpen().withDoc("data later tasks of the node get at the top level of their config (providerid, ssh-auth, ...)")),
	opt("ipaddresses", sMap(sString("an address")).withDoc("the node's addresses (access_v4, bind_v4, ...)")),
	opt("hostname", sString("the node's hostname")),
).withDoc("Coopr's result, filled through self.result (auto-vivifying)")

func providerKind() *Kind {
	fields := opt("fields", sOpen().withDoc("config.provider.provisioner with the definition's parameter defaults applied"))
	create := sOpen(opt("flavor", sString("")), opt("image", sString("")), opt("hostname", sString("")), fields)
	other := sOpen(opt("providerid", sString("the id create returned in result.providerid")), fields)
	return &Kind{
		Family: Provider, Key: "providertypes", Base: "Provider", Coopr: true,
		Title:  "Coopr provider (creates and deletes machines)",
		Caller: "Coopr server, `loomd run`, the loomd queue",
		Hooks: []Hook{
			{Name: "create", TaskName: "CREATE", Input: create, Result: cooprResult, Absent: cooprAbsent,
				Doc: "ask the cloud for a machine; set result.providerid"},
			{Name: "confirm", TaskName: "CONFIRM", Input: other, Result: cooprResult, Absent: cooprAbsent,
				Doc: "wait for the machine; set ipaddresses, hostname and result.ssh-auth"},
			{Name: "delete", TaskName: "DELETE", Input: other, Result: cooprResult, Absent: cooprAbsent,
				Doc: "delete the machine"},
		},
	}
}

func automatorKind() *Kind {
	base := []Prop{opt("hostname", sString("")), opt("ipaddress", sString("config.ipaddresses.access_v4, else config.ipaddress")),
		opt("sshauth", sOpen().withDoc("config[\"ssh-auth\"]: user, password, identityfile"))}
	withFields := sOpen(append(base, opt("fields", sOpen().withDoc("config.service.action.fields with parameter defaults applied")))...)
	hook := func(name, task, doc string, in *Shape) Hook {
		return Hook{Name: name, TaskName: task, Input: in, Result: cooprResult, Absent: cooprAbsent, Doc: doc}
	}
	return &Kind{
		Family: Automator, Key: "automatortypes", Base: "Automator", Coopr: true,
		Title:  "Coopr automator (installs and runs services on a node)",
		Caller: "Coopr server, `loomd run`, the loomd queue",
		Hooks: []Hook{
			hook("bootstrap", "BOOTSTRAP", "prepare the node (every automator of config.automators runs)", sOpen(base...)),
			hook("install", "INSTALL", "install a service", withFields),
			hook("configure", "CONFIGURE", "configure a service", withFields),
			hook("init", "INITIALIZE", "initialise a service", withFields),
			hook("start", "START", "start a service", withFields),
			hook("stop", "STOP", "stop a service", withFields),
			hook("remove", "REMOVE", "remove a service", withFields),
			{Name: "check", TaskName: "CHECK", Input: withFields, Result: cooprResult, Optional: true,
				Absent: "the task fails with \"unimplemented check in <classname>\"; no warning: a type need not define it",
				Doc:    "say whether a service still runs (status 0) or not (non-zero, with a message): loomd plan --refresh runs a service's check action"},
		},
	}
}

// clusterInfo is kontainer-engine's ClusterInfo with snake_case keys.
var clusterInfo = sObj(
	opt("version", sString("Kubernetes version")),
	opt("service_account_token", sString("token post_check creates for Rancher")),
	opt("endpoint", sString("API endpoint; Rancher adds https:// when it has no scheme")),
	opt("username", sString("")),
	opt("password", sString("")),
	opt("root_ca_certificate", sString("base64")),
	opt("client_certificate", sString("base64")),
	opt("client_key", sString("base64")),
	opt("node_count", sInt("")),
	opt("metadata", sMap(sString("")).withDoc("the only state that survives between calls (each call is a new process)")),
	opt("status", sString("")),
	opt("create_error", sString("set by the host from a partial create's error")),
).withDoc("Rancher stores it; state goes in metadata").named("ClusterInfo")

var driverOptions = sObj(
	opt("bool", sMap(sBool(""))),
	opt("string", sMap(sString(""))),
	opt("int", sMap(sInt(""))),
	opt("string_slice", sMap(sList(sString("")))),
).named("DriverOptions").withDoc("keys are schema field names (diskSizeGb) or flag names (disk-size-gb); cluster metadata is merged into string")

func clusterDriverKind() *Kind {
	flag := sObj(
		req("type", sString("", "string", "bool", "boolPtr", "int", "intPtr", "stringSlice")),
		opt("usage", sString("becomes the Rancher field's description")),
		opt("value", sString("")),
		opt("password", sBool("a string shown as a password field")),
		opt("default", sAny("a scalar or a list matching type")),
	).named("Flag")
	ci := obj1("cluster_info", clusterInfo)
	etcd := sObj(req("cluster_info", clusterInfo), req("options", driverOptions), req("snapshot_name", sString("")))
	noETCD := unimplemented("ETCD backup operations are not implemented")
	caps := sObj(opt("get_version", sBool("")), opt("set_version", sBool("")), opt("get_cluster_size", sBool("")),
		opt("set_cluster_size", sBool("")), opt("etcd_backup", sBool(""))).withDoc("capability bits 0-4")
	return &Kind{
		Family: ClusterDriver, Key: "clusterdrivers", Base: "ClusterDriver",
		Title:  "Rancher kontainer-engine cluster driver",
		Caller: "Rancher / kontainer-engine, gRPC service types.Driver (one process per operation), served by `loomd driver rancher` and `loomd bundle` ([rancher.md](rancher.md))",
		Hooks: []Hook{
			{Name: "create_options", Required: true, Input: sObj(), Result: sMap(flag).withDoc("flag key -> Flag"),
				Doc: "the flags Rancher turns into the driver's schema (field name: the flag key in lowerCamel)"},
			{Name: "update_options", Input: sObj(), Result: sMap(flag), Absent: "no flags (empty DriverFlags)",
				absent: answer(func() any { return map[string]any{} }), Doc: "flags of an update (used by the CLI only)"},
			{Name: "create", Required: true, Partial: true,
				Input:  sObj(req("options", driverOptions), opt("cluster_info", clusterInfo)),
				Result: clusterInfo, Doc: "create the cluster; return cluster_info (input cluster_info is set only when a failed create is retried). `return ci, err` keeps ci (metadata) for the retry: the host sets create_error"},
			{Name: "update", Input: sObj(req("cluster_info", clusterInfo), req("options", driverOptions)), Result: clusterInfo,
				Absent: "error terminal/unimplemented \"update not supported\"", absent: unimplemented("update not supported"),
				Doc: "change the cluster"},
			{Name: "post_check", Required: true, Input: ci, Result: clusterInfo,
				Doc: "fill service_account_token (and endpoint, root_ca_certificate); must be re-runnable at any time"},
			{Name: "remove", Required: true, Input: ci, Doc: "delete the cluster"},
			{Name: "get_version", Input: ci, Result: sObj(opt("version", sString(""))),
				Absent: "empty KubernetesVersion; capability get_version cleared",
				absent: answer(func() any { return map[string]any{} })},
			{Name: "set_version", Input: sObj(req("cluster_info", clusterInfo), req("version", sString(""))),
				Absent: "success; capability set_version cleared", absent: answer(nothing)},
			{Name: "get_cluster_size", Input: ci, Result: sObj(opt("count", sInt(""))),
				Absent: "empty NodeCount; capability get_cluster_size cleared",
				absent: answer(func() any { return map[string]any{} })},
			{Name: "set_cluster_size", Input: sObj(req("cluster_info", clusterInfo), req("count", sInt(""))),
				Absent: "success; capability set_cluster_size cleared", absent: answer(nothing)},
			{Name: "capabilities", Input: sObj(), Result: caps,
				Absent: "derived from the hooks defined (etcd_backup needs etcd_save and etcd_restore)",
				absent: func(_ map[string]any, defined func(string) bool) (any, *CallError) {
					return map[string]any{
						"get_version": defined("get_version"), "set_version": defined("set_version"),
						"get_cluster_size": defined("get_cluster_size"), "set_cluster_size": defined("set_cluster_size"),
						"etcd_backup": defined("etcd_save") && defined("etcd_restore"),
					}, nil
				}, Doc: "Rancher's readiness probe; which optional operations work"},
			{Name: "etcd_save", Input: etcd, Absent: "error terminal/unimplemented \"ETCD backup operations are not implemented\"", absent: noETCD},
			{Name: "etcd_restore", Input: etcd, Result: clusterInfo, Absent: "same error as etcd_save", absent: noETCD},
			{Name: "etcd_remove_snapshot", Input: etcd, Absent: "same error as etcd_save", absent: noETCD},
			{Name: "k8s_capabilities", Input: sObj(req("options", driverOptions)),
				Result: sObj(
					opt("l4_load_balancer", sObj(opt("enabled", sBool("")), opt("provider", sString("")),
						opt("protocols_supported", sList(sString(""))), opt("health_check_supported", sBool("")))),
					opt("ingress_controllers", sList(sObj(opt("ingress_provider", sString("")), opt("custom_default_backend", sBool(""))))),
					opt("node_pool_scaling_supported", sBool("")),
					opt("node_port_range", sString("")),
				),
				Absent: "empty K8sCapabilities", absent: answer(func() any { return map[string]any{} })},
			{Name: "remove_legacy_service_account", Input: ci, Absent: "success", absent: answer(nothing)},
		},
		Errors: []ErrorClass{
			{Class: ClassRetry, Doc: "a plain message; Rancher gets it as the error text"},
			{Class: ClassTerminal, Doc: "the wire has no classes: Rancher sees the message"},
		},
		Secrets: []string{"password", "service_account_token", "client_key"},
	}
}

func obj1(name string, s *Shape) *Shape { return sObj(req(name, s)) }

var k8sMeta = sOpen(opt("name", sString("")), opt("namespace", sString("")), opt("uid", sString("")),
	opt("labels", sMap(sString(""))), opt("annotations", sMap(sString(""))))

var objectBucketClaim = sOpen(
	req("metadata", k8sMeta),
	opt("spec", sOpen(opt("storageClassName", sString("")), opt("bucketName", sString("")),
		opt("generateBucketName", sString("")), opt("additionalConfig", sMap(sString(""))), opt("objectBucketName", sString("")))),
	opt("status", sOpen(opt("phase", sString("")))),
).withDoc("as Kubernetes JSON").named("ObjectBucketClaim")

var objectBucket = sOpen(
	opt("metadata", k8sMeta),
	opt("spec", sOpen(
		opt("storageClassName", sString("")), opt("reclaimPolicy", sString("")), opt("claimRef", sOpen()),
		opt("endpoint", sOpen(opt("bucketHost", sString("")), opt("bucketPort", sInt("")), opt("bucketName", sString("")),
			opt("region", sString("")), opt("subRegion", sString("")), opt("additionalConfig", sMap(sString(""))))),
		opt("additionalState", sMap(sString("")).withDoc("what delete and revoke need: credentials are never stored")))),
	opt("status", sOpen(opt("phase", sString("")))),
).withDoc("as read back from Kubernetes: no credentials").named("ObjectBucket")

func bucketProvisionerKind() *Kind {
	request := sObj(
		req("bucket_name", sString("the bucket; endpoint.bucket_name must equal it")),
		opt("user_id", sString("from generate_user_id")),
		opt("reclaim_policy", sString("", "Delete", "Retain", "Recycle")),
		req("claim", objectBucketClaim),
		opt("parameters", sMap(sString("")).withDoc("the StorageClass parameters")),
	)
	connection := sObj(
		req("endpoint", sObj(req("bucket_host", sString("")), req("bucket_port", sInt("")), req("bucket_name", sString("")),
			opt("region", sString("")), opt("sub_region", sString("")), opt("additional_config", sMap(sString(""))))),
		req("access_keys", sObj(req("access_key_id", sString("")), req("secret_access_key", sString("")))),
		opt("additional_secret_data", sMap(sString(""))),
		opt("additional_state", sMap(sString("")).withDoc("persisted on the ObjectBucket; what delete/revoke will need")),
		opt("reclaim_policy", sString("", "Delete", "Retain", "Recycle")),
	).named("Connection").withDoc("the library writes the Secret (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the ConfigMap (BUCKET_*)")
	ob := obj1("object_bucket", objectBucket)
	return &Kind{
		Family: BucketProvisioner, Key: "bucketprovisioners", Base: "BucketProvisioner",
		Title:  "lib-bucket-provisioner provisioner (ObjectBucketClaims)",
		Caller: "lib-bucket-provisioner's controller, any of its three interface generations, through the Go adapter of api.Provisioner in adapters/bucketprovisioner ([lib-bucket-provisioner.md](lib-bucket-provisioner.md))",
		Hooks: []Hook{
			{Name: "generate_user_id", Input: sObj(req("claim", objectBucketClaim), opt("object_bucket", objectBucket)),
				Result: sString("a user id, stable across calls"),
				Absent: "\"obc-<namespace>-<name>\" of the claim",
				absent: func(in map[string]any, _ func(string) bool) (any, *CallError) {
					md, _ := dig(in, "claim", "metadata").(map[string]any)
					ns, _ := md["namespace"].(string)
					name, _ := md["name"].(string)
					return "obc-" + ns + "-" + name, nil
				}, Doc: "generation 3 only: the user the bucket's credentials belong to (provision and grant then get it as user_id)"},
			{Name: "provision", Required: true, Input: request, Result: connection, verify: sameBucket,
				Doc: "create the bucket (greenfield) and its credentials; generation 3 calls it on every reconcile: be idempotent"},
			{Name: "grant", Input: request, Result: connection, verify: sameBucket,
				Absent: "error terminal/unimplemented \"brownfield (grant) not supported by this provisioner\"",
				absent: unimplemented("brownfield (grant) not supported by this provisioner"),
				Doc:    "give access to an existing bucket (the StorageClass names it); idempotent"},
			{Name: "delete", Input: ob, Absent: "error terminal/unimplemented \"delete not supported\" (never leak buckets silently)",
				absent: unimplemented("delete not supported"), Doc: "delete the bucket (greenfield, reclaimPolicy Delete)"},
			{Name: "revoke", Input: ob, Absent: "success (nothing to revoke)", absent: answer(nothing),
				Doc: "remove the access provision or grant gave (every other deletion)"},
			{Name: "update", Input: ob, Absent: "success", absent: answer(nothing),
				Doc: "generation 2 only: the claim's additionalConfig changed; object_bucket.spec.endpoint.additionalConfig holds the new config (the previous one when the library reverts)"},
		},
		Errors: []ErrorClass{
			{Class: ClassRetry, Reasons: []string{"bucket_exists"},
				Doc: "every error is retried with backoff (5 ms to 1000 s); bucket_exists is BucketExistsErr (generation 1: the bucket is not deleted)"},
		},
		Flags:   map[string]ErrorFlag{"bucket_exists": {Class: ClassRetry, Reason: "bucket_exists"}},
		Secrets: []string{"secret_access_key"},
	}
}

// sameBucket enforces the library's rule that the endpoint names the
// bucket it was asked for.
func sameBucket(in map[string]any, out any) error {
	want, _ := in["bucket_name"].(string)
	got, _ := dig(out, "endpoint", "bucket_name").(string)
	if got != want {
		return fmt.Errorf("result.endpoint.bucket_name is %q but the request's bucket_name is %q; they must be equal (the library fails every later reconcile otherwise)", got, want)
	}
	return nil
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

var machineSpec = sOpen(
	opt("metadata", sOpen()), opt("taints", sList(sOpen())), opt("versions", sOpen()), opt("providerID", sString("")),
	opt("providerSpec", sOpen(opt("value", sOpen(
		opt("cloudProvider", sString("")), opt("cloudProviderSpec", sOpen()), opt("operatingSystem", sString("")),
		opt("operatingSystemSpec", sOpen()), opt("sshPublicKeys", sList(sString(""))), opt("network", sOpen()))))),
).withDoc("as Kubernetes JSON").named("MachineSpec")

var machine = sOpen(req("metadata", k8sMeta), opt("spec", machineSpec), opt("status", sOpen())).
	withDoc("as Kubernetes JSON; metadata.uid tags the instance").named("Machine")

var instance = sObj(
	opt("name", sString("")), opt("id", sString("")),
	opt("provider_id", sString("the node's spec.providerID; empty: none")),
	opt("addresses", sMap(sString("", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS", "Hostname"))),
	opt("status", sString("", "running", "creating", "deleting", "deleted", "unknown")),
).named("Instance")

func cloudProviderKind() *Kind {
	m := obj1("machine", machine)
	return &Kind{
		Family: CloudProvider, Key: "cloudproviders", Base: "CloudProvider",
		Title:  "kubermatic machine-controller cloud provider",
		Caller: "machine-controller and its admission webhook, through the Go adapter of types.Provider in adapters/machinecontroller ([machine-controller.md](machine-controller.md))",
		Hooks: []Hook{
			{Name: "add_defaults", Input: obj1("spec", machineSpec), Result: machineSpec, Absent: "the spec unchanged",
				absent: func(in map[string]any, _ func(string) bool) (any, *CallError) { return in["spec"], nil },
				Doc:    "fill defaults into the spec (admission webhook)"},
			{Name: "validate", Input: obj1("spec", machineSpec), Absent: "accept", absent: answer(nothing),
				Doc: "reject a bad spec with a terminal InvalidConfiguration error (admission webhook)"},
			{Name: "get", Required: true, Input: m, Result: instance, Classes: []string{ClassNotFound},
				Doc: "find the machine's instance (by the uid tag); not_found when there is none"},
			{Name: "create", Required: true, Input: sObj(req("machine", machine), req("userdata", sString("cloud-init from the bootstrap provider"))),
				Result: instance, Doc: "create the instance; must be idempotent (tag it with metadata.uid)"},
			{Name: "cleanup", Required: true, Input: m, Result: sBool("true: gone; false: call again in 10 s"),
				Doc: "delete the instance; called until it returns true"},
			{Name: "metrics_labels", Input: m, Result: sMap(sString("")), Absent: "no labels",
				absent: answer(func() any { return map[string]any{} }), Doc: "labels for the machine metric (size, ...); no API calls"},
			{Name: "migrate_uid", Input: sObj(req("machine", machine), req("new_uid", sString(""))), Absent: "nothing to do", absent: answer(nothing),
				Doc: "re-tag the instance with the machine's new uid"},
			{Name: "set_metrics", Input: sObj(req("machines", sList(machine))), Absent: "nothing to do", absent: answer(nothing),
				Doc: "every 10 minutes with the provider's machines"},
		},
		Errors: []ErrorClass{
			{Class: ClassRetry, Reasons: []string{"os_not_supported"}, Doc: "backoff; os_not_supported is ErrOSNotSupported"},
			{Class: ClassTerminal, Reasons: []string{"InvalidConfiguration", "UnsupportedChange", "InsufficientResources",
				"CreateError", "UpdateError", "DeleteError", "JoinClusterTimeoutError", "os_not_supported"},
				Doc: "TerminalError: the machine's status gets errorReason/errorMessage"},
			{Class: ClassNotFound, Doc: "ErrInstanceNotFound (get only): the controller creates the instance"},
		},
		Flags:   map[string]ErrorFlag{"os_not_supported": {Class: ClassRetry, Reason: "os_not_supported"}},
		Secrets: []string{"token", "password", "secretKey", "userdata"},
		Settings: sObj(
			opt("uid_tagging", sBool("the plugin tags each instance with the Machine's metadata.uid and finds it by that tag, as Hetzner's provider does")),
			opt("config_vars", sMap(sObj(
				req("type", sString("string: a ConfigVarString; bool: a ConfigVarBool", "string", "bool")),
				opt("env", sString("environment variable of the controller read when the field resolves to nothing (GetStringValueOrEnv, GetBoolValueOrEnv)")),
			)).withDoc("cloudProviderSpec fields (a dotted path for a nested one) holding machine-controller ConfigVarString/ConfigVarBool values: "+
				"the adapter resolves each (value, secretKeyRef, configMapKeyRef, then env) through the controller's ConfigVarResolver before every hook but add_defaults, "+
				"and the hook sees the plain string or boolean; a value read from a Secret is redacted from messages and logs")),
			opt("kubernetes", sString("the controller's Kubernetes client through self.host: read (k8s_get, k8s_list) or read_write (and k8s_delete); absent: none", "read", "read_write")),
		).withDoc("read by adapters/machinecontroller ([machine-controller.md](machine-controller.md))"),
		RequiredWhen: []SettingRequirement{{Setting: "uid_tagging", Hooks: []string{"migrate_uid"},
			Why: "machine-controller calls MigrateUID when a Machine's uid changes (its machines.k8s.io to cluster.k8s.io migration), and a provider that finds instances by uid " +
				"must re-tag them with the new one, or get finds nothing and the controller creates a second instance while the first one leaks"}},
	}
}

var kloudCredential = sObj(
	opt("title", sString("")), opt("provider", sString("")), opt("identifier", sString("")),
	opt("credential", sOpen().withDoc("typed by schema.credential")),
	opt("bootstrap", sOpen().withDoc("outputs of the bootstrap templates")),
).named("Credential").withDoc("stack.Credential")

var kloudMachine = sObj(
	req("credential", kloudCredential),
	opt("metadata", sOpen().withDoc("the machine's stored metadata")),
	opt("machine", sOpen(opt("label", sString("")), opt("attributes", sOpen()))),
).named("MachineRequest")

func kloudProviderKind() *Kind {
	value := sObj(req("name", sString("")), req("type", sString("", "string", "integer", "file", "enum", "duration", "object")),
		opt("label", sString("")), opt("secret", sBool("")), opt("read_only", sBool("")),
		opt("values", sList(sObj(req("title", sString("")), req("value", sAny(""))))),
		opt("attribute", sString("metadata only: the Terraform attribute of the machine it is read from after apply; default its name")),
	).named("Value")
	template := sObj(opt("key", sString("unique content id; default <group>-<stack id>")), req("content", sString("JSON Terraform"))).named("Template")
	cred := obj1("credential", kloudCredential)
	validator := func(name, what string) Hook {
		return Hook{Name: name, Input: obj1("value", sOpen()), Absent: "accept", absent: answer(nothing),
			Doc: "check " + what + " (stack.Validator's Valid())"}
	}
	notImpl := unimplemented("not implemented")
	metaPatch := sOpen().withDoc("patched onto the stored metadata; nil: unchanged")
	metaPatch.Nullable = true
	return &Kind{
		Family: KloudProvider, Key: "kloudproviders", Base: "KloudProvider",
		Title:  "Koding Kloud provider (stacks and machines)",
		Caller: "Koding kloud, through the Go adapter in adapters/kloud that builds a provider.Provider for provider.Register ([kloud.md](kloud.md))",
		Hooks: []Hook{
			{Name: "schema", Input: sObj(), Result: sObj(opt("credential", sList(value)), opt("bootstrap", sList(value)), opt("metadata", sList(value))),
				Absent: "credential: a free-form map; bootstrap: none; metadata: the machine's attributes",
				absent: answer(func() any { return map[string]any{} }),
				Doc:    "describe the credential, bootstrap and metadata fields: the host builds kloud's schema types from them, once, when it registers the provider"},
			validator("valid_credential", "a credential"),
			validator("valid_bootstrap", "bootstrap outputs after apply"),
			validator("valid_metadata", "machine metadata before a machine hook"),
			{Name: "verify_credential", Input: cred, Absent: "error terminal/unimplemented \"not implemented\"", absent: notImpl,
				Doc: "check the credential against the cloud; an error is verified=false with its message"},
			{Name: "bootstrap_templates", Input: cred, Result: sList(template), Absent: "no templates",
				absent: answer(func() any { return []any{} }), Doc: "Terraform for the per-credential resources (VPC, keys)"},
			{Name: "apply_template", Required: true,
				Input: sObj(req("credential", kloudCredential), req("template", template), opt("variables", sOpen()),
					opt("username", sString("")), opt("group", sString("")), opt("stack_id", sString("")),
					opt("kite_keys", sMap(sString("")).withDoc("with host.no_cloud_init: a fresh kite key per machine label, for the plugin to hand Klient itself"))),
				Result: template, Doc: "rewrite the user's template for the cloud (bootstrap outputs, defaults); the host then adds Klient's cloud-init and kite keys to each machine's user data and shadows the credential's secret variables"},
			{Name: "start", Input: kloudMachine, Result: metaPatch, Absent: "error terminal/unimplemented \"not implemented\"", absent: notImpl,
				Classes: []string{ClassNotFound}},
			{Name: "stop", Input: kloudMachine, Result: metaPatch, Absent: "error terminal/unimplemented \"not implemented\"", absent: notImpl,
				Classes: []string{ClassNotFound}},
			{Name: "info", Required: true, Input: kloudMachine, Classes: []string{ClassNotFound},
				Result: sObj(req("state", sString("", "Unknown", "NotInitialized", "Building", "Starting", "Running", "Stopping",
					"Stopped", "Rebooting", "Terminating", "Terminated", "Snapshotting", "Pending")), opt("metadata", metaPatch)),
				Doc: "the machine's real state; start and stop run it first"},
		},
		Errors: []ErrorClass{
			{Class: ClassRetry, Doc: "a message; code carries a stack.Error code (412 ...)"},
			{Class: ClassTerminal},
			{Class: ClassNotFound, Doc: "machine hooks: ErrMachineNotFound (106)"},
		},
		Secrets: []string{"secret", "password", "token"},
		Settings: sObj(
			opt("provider_name", sString("the name kloud registers the provider under (provider.Provider.Name), the prefix of its resources and credential variables; default the type's name")),
			opt("resource_name", sString("the machine resource: <provider_name>_<resource_name> in templates (provider.Provider.ResourceName); default instance")),
			opt("userdata", sString("the machine resource's user-data field (provider.Provider.Userdata); default user_data")),
			opt("userdata_path", sList(sString("")).withDoc("where user data sits in the template's resources (provider.Provider.UserdataPath); default [<provider_name>_<resource_name>, \"*\", <userdata>]")),
			opt("no_cloud_init", sBool("the cloud runs no cloud-init (provider.Provider.NoCloudInit): the host builds no Klient cloud-init, and apply_template gets kite_keys to install Klient itself")),
		).withDoc("read by adapters/kloud ([kloud.md](kloud.md))"),
	}
}
