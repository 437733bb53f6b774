// Package bucketprovisioner implements lib-bucket-provisioner's
// Provisioner interface (github.com/kube-object-storage/lib-bucket-provisioner)
// by calling a Lua plugin of the bucketprovisioners kind through a Loom
// runtime. The library changed its interface twice; one build of the
// package serves one generation, chosen by build tag, and compile-checks
// against that generation's api.Provisioner:
//
//   - generation 3 (default; v0.0.0-20260420161730-5164e3746489, HEAD):
//     GenerateUserID, Provision, Grant, Delete, Revoke;
//   - generation 2 (-tags bucketgen2; v0.0.0-20220811192603-abc54caa34ac,
//     the last commit before the breaking change): Provision, Grant,
//     Delete, Revoke, Update;
//   - generation 1 (-tags bucketgen1; v0.0.0-20191209225510-8423df408133,
//     the tag kubernetes-v1.14.1): Provision, Grant, Delete, Revoke.
//
// The types are the real ones, imported from the library; a controller
// runs the adapter as any provisioner:
//
//	rt, _ := runtime.New(runtime.Options{PluginsDir: "/plugins", Bindings: std.New(std.Options{})})
//	_ = rt.Load(ctx)
//	p, err := bucketprovisioner.New(rt, "s3like", bucketprovisioner.Options{Context: ctx})
//	ctrl, err := provisioner.NewProvisioner(cfg, "s3like.example.com/bucket", p, "")
//	err = ctrl.RunWithContext(ctx) // generation 1: ctrl.Run(stopCh)
//
// Each method runs one hook (GenerateUserID: generate_user_id, Provision:
// provision, Grant: grant, Delete: delete, Revoke: revoke, Update:
// update). The runtime checks the input and the result against the
// contract (loomd kinds bucketprovisioner) before the library sees it: a
// connection without an endpoint or access keys, or whose endpoint names
// another bucket than the one asked for, is an error, never an
// ObjectBucket.
package bucketprovisioner

import (
	"context"
	"errors"
	"log/slog"

	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
	apierrors "github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api/errors"
	corev1 "k8s.io/api/core/v1"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
)

// Options configure a Provisioner.
type Options struct {
	// Context is the parent of every call: cancelling it (the controller
	// shutting down) stops the hooks that run. The Provisioner interface
	// has no context of its own. Default context.Background(); each hook
	// is bounded by its timeout in the plugin's definition either way.
	Context context.Context
	// Logger receives the plugin's log lines, each with the claim's
	// namespace/name as its task. Default: the runtime's logger.
	Logger *slog.Logger
}

// Provisioner is a lib-bucket-provisioner Provisioner backed by one Lua
// bucketprovisioners type. It is safe for concurrent use
// (LIB_BUCKET_PROVISIONER_THREADS workers): each call checks out its own
// VM.
type Provisioner struct {
	t    *kindcall.Type
	opts Options
}

// New returns the provisioner for the loaded bucketprovisioners type name.
func New(rt *runtime.Runtime, name string, opts Options) (*Provisioner, error) {
	t, err := kindcall.New(rt, name, runtime.BucketProvisioner)
	if err != nil {
		return nil, err
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	return &Provisioner{t: t, opts: opts}, nil
}

// Provision runs provision (greenfield): create the bucket and its
// credentials. Generation 3 calls it on every reconcile; generations 1
// and 2 until the claim is bound.
func (p *Provisioner) Provision(options *api.BucketOptions) (*v1alpha1.ObjectBucket, error) {
	return p.connect("provision", options)
}

// Grant runs grant (brownfield: the StorageClass names an existing
// bucket). Without the hook it is a terminal "brownfield (grant) not
// supported by this provisioner" error, which the library retries.
func (p *Provisioner) Grant(options *api.BucketOptions) (*v1alpha1.ObjectBucket, error) {
	return p.connect("grant", options)
}

// Delete runs delete with {object_bucket}, the ObjectBucket read back from
// Kubernetes: no credentials, additionalState as provision left it.
func (p *Provisioner) Delete(ob *v1alpha1.ObjectBucket) error {
	return p.call("delete", obID(ob), map[string]any{"object_bucket": ob}, nil)
}

// Revoke runs revoke with {object_bucket}; without the hook it succeeds.
func (p *Provisioner) Revoke(ob *v1alpha1.ObjectBucket) error {
	return p.call("revoke", obID(ob), map[string]any{"object_bucket": ob}, nil)
}

// connection is the provision and grant hooks' result.
type connection struct {
	Endpoint struct {
		BucketHost       string            `json:"bucket_host"`
		BucketPort       int               `json:"bucket_port"`
		BucketName       string            `json:"bucket_name"`
		Region           string            `json:"region"`
		SubRegion        string            `json:"sub_region"`
		AdditionalConfig map[string]string `json:"additional_config"`
	} `json:"endpoint"`
	AccessKeys struct {
		AccessKeyID     string `json:"access_key_id"`
		SecretAccessKey string `json:"secret_access_key"`
	} `json:"access_keys"`
	AdditionalSecretData map[string]string `json:"additional_secret_data"`
	AdditionalState      map[string]string `json:"additional_state"`
	ReclaimPolicy        string            `json:"reclaim_policy"`
}

func (p *Provisioner) connect(hook string, o *api.BucketOptions) (*v1alpha1.ObjectBucket, error) {
	if o == nil || o.ObjectBucketClaim == nil {
		return nil, errors.New("bucketprovisioner: " + hook + " needs BucketOptions with the ObjectBucketClaim (the library always sets it)")
	}
	in := map[string]any{"bucket_name": o.BucketName, "claim": o.ObjectBucketClaim}
	if id := userID(o); id != "" {
		in["user_id"] = id
	}
	if o.ReclaimPolicy != nil {
		in["reclaim_policy"] = string(*o.ReclaimPolicy)
	}
	if o.Parameters != nil {
		in["parameters"] = o.Parameters
	}
	var c connection
	if err := p.call(hook, claimID(o.ObjectBucketClaim), in, &c); err != nil {
		return nil, err
	}
	ob := &v1alpha1.ObjectBucket{Spec: v1alpha1.ObjectBucketSpec{Connection: &v1alpha1.Connection{
		Endpoint: &v1alpha1.Endpoint{
			BucketHost: c.Endpoint.BucketHost, BucketPort: c.Endpoint.BucketPort, BucketName: c.Endpoint.BucketName,
			Region: c.Endpoint.Region, SubRegion: c.Endpoint.SubRegion, AdditionalConfigData: c.Endpoint.AdditionalConfig,
		},
		Authentication: &v1alpha1.Authentication{
			AccessKeys:           &v1alpha1.AccessKeys{AccessKeyID: c.AccessKeys.AccessKeyID, SecretAccessKey: c.AccessKeys.SecretAccessKey},
			AdditionalSecretData: c.AdditionalSecretData,
		},
		AdditionalState: c.AdditionalState,
	}}}
	if c.ReclaimPolicy != "" {
		rp := corev1.PersistentVolumeReclaimPolicy(c.ReclaimPolicy)
		ob.Spec.ReclaimPolicy = &rp
	}
	return ob, nil
}

// call runs a hook. A bucket_exists error is returned as the library's
// BucketExistsErr value (its IsBucketExists is a plain type assertion, so
// it cannot be wrapped); every other failure is a *kindcall.Error, which
// the library retries with backoff.
func (p *Provisioner) call(hook, id string, in, out any) error {
	err := p.t.Call(p.opts.Context, kindcall.Request{Hook: hook, Input: in, ID: id, Logger: p.opts.Logger}, out)
	var ce *kindcall.Error
	if errors.As(err, &ce) && ce.Reason == "bucket_exists" {
		return *apierrors.NewBucketExistsError(ce.Error())
	}
	return err
}

func claimID(obc *v1alpha1.ObjectBucketClaim) string {
	if obc == nil {
		return ""
	}
	return obc.Namespace + "/" + obc.Name
}

func obID(ob *v1alpha1.ObjectBucket) string {
	if ob == nil {
		return ""
	}
	if ob.Spec.ClaimRef != nil {
		return ob.Spec.ClaimRef.Namespace + "/" + ob.Spec.ClaimRef.Name
	}
	return ob.Name
}
