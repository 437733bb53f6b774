package bucketprovisioner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
	apierrors "github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api/errors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
	"github.com/loomrt/loom/runtime/luatest"
)

// store is a fake of the S3-compatible admin API that the example plugin
// examples/kinds/s3like wraps: buckets with an owner, users with access
// keys, per-bucket grants, behind a bearer token.
type store struct {
	mu      sync.Mutex
	token   string
	buckets map[string]string    // name -> owner
	users   map[string][2]string // id -> access key, secret key
	grants  map[string]bool      // user/bucket
	configs map[string]map[string]any
}

func newStore() *store {
	return &store{token: "admin-token-1", buckets: map[string]string{}, users: map[string][2]string{},
		grants: map[string]bool{}, configs: map[string]map[string]any{}}
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		reply(401, map[string]any{"error": "bad token"})
		return
	}
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case parts[0] == "buckets" && len(parts) == 3 && r.Method == "PUT": // the bucket's config
		if s.buckets[parts[1]] == "" {
			reply(404, map[string]any{"error": "no bucket"})
			return
		}
		s.configs[parts[1]] = body
		reply(204, nil)
	case parts[0] == "buckets" && r.Method == "PUT":
		if o, ok := s.buckets[parts[1]]; ok && o != body["owner"] {
			reply(409, map[string]any{"error": "bucket " + parts[1] + " belongs to " + o})
			return
		}
		s.buckets[parts[1]] = body["owner"].(string)
		reply(200, map[string]any{"name": parts[1]})
	case parts[0] == "buckets" && s.buckets[parts[1]] == "":
		reply(404, map[string]any{"error": "no bucket"})
	case parts[0] == "buckets" && r.Method == "GET":
		reply(200, map[string]any{"name": parts[1]})
	case parts[0] == "buckets" && r.Method == "DELETE":
		delete(s.buckets, parts[1])
		reply(204, nil)
	case r.Method == "POST": // /users
		id := body["id"].(string)
		if _, ok := s.users[id]; !ok {
			s.users[id] = [2]string{"AK-" + id, "SK-" + id}
		}
		reply(200, map[string]any{"accessKey": s.users[id][0], "secretKey": s.users[id][1]})
	case len(parts) == 2 && r.Method == "DELETE":
		if _, ok := s.users[parts[1]]; !ok {
			reply(404, map[string]any{"error": "no user"})
			return
		}
		delete(s.users, parts[1])
		reply(204, nil)
	case len(parts) == 4 && r.Method == "PUT":
		s.grants[parts[1]+"/"+parts[3]] = true
		reply(204, nil)
	case len(parts) == 4 && r.Method == "DELETE":
		delete(s.grants, parts[1]+"/"+parts[3])
		reply(204, nil)
	default:
		reply(405, nil)
	}
}

func (s *store) state() (buckets, users, grants int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets), len(s.users), len(s.grants)
}

func newProvisioner(t *testing.T, opts Options) (*Provisioner, string) {
	t.Helper()
	work := t.TempDir()
	rt := luatest.NewRuntime(t, runtime.Options{
		PluginsDir: filepath.Join("..", "..", "examples", "kinds"),
		WorkDir:    work,
		Bindings:   std.New(std.Options{}),
	})
	p, err := New(rt, "s3like", opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, filepath.Join(work, "default", "bucketprovisioners", "s3like")
}

func claim(name string) *v1alpha1.ObjectBucketClaim {
	return &v1alpha1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "web", UID: types.UID("c-" + name)},
		Spec:       v1alpha1.ObjectBucketClaimSpec{StorageClassName: "s3like", GenerateBucketName: name},
	}
}

// readBack is the ObjectBucket as Delete and Revoke get it: the library
// re-reads it from the API, so the credentials (json:"-") are gone.
func readBack(t *testing.T, ob *v1alpha1.ObjectBucket, obc *v1alpha1.ObjectBucketClaim, policy corev1.PersistentVolumeReclaimPolicy) *v1alpha1.ObjectBucket {
	t.Helper()
	ob.Name = "obc-" + obc.Namespace + "-" + obc.Name
	ob.Spec.StorageClassName = obc.Spec.StorageClassName
	ob.Spec.ReclaimPolicy = &policy
	ob.Spec.ClaimRef = &corev1.ObjectReference{Namespace: obc.Namespace, Name: obc.Name, UID: obc.UID}
	raw, err := json.Marshal(ob)
	if err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.ObjectBucket
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Spec.Authentication != nil {
		t.Fatal("credentials survived the read-back")
	}
	return &back
}

func (s *store) config(bucket string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configs[bucket]
}

// TestProvisionerLifecycle drives the example s3like plugin through the
// adapter the way lib-bucket-provisioner does, in every generation (run
// with -tags bucketgen1 or bucketgen2 for the older ones): a greenfield
// claim (its user id from GenerateUserID in generation 3; Provision on
// every reconcile), a brownfield one (Grant), then Revoke and Delete with
// the ObjectBucket read back.
func TestProvisionerLifecycle(t *testing.T) {
	s3 := newStore()
	srv := httptest.NewServer(s3)
	defer srv.Close()
	var logs bytes.Buffer
	p, work := newProvisioner(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	params := map[string]string{"adminUrl": srv.URL, "host": "s3.local", "port": "9000", "region": "eu-1"}
	deletePolicy := corev1.PersistentVolumeReclaimDelete

	photos := claim("photos")
	opts := &api.BucketOptions{ReclaimPolicy: &deletePolicy, BucketName: "photos-1", ObjectBucketClaim: photos, Parameters: params}
	// Without the operator's admin token: an error the library retries,
	// saying where the token goes.
	if _, err := p.Provision(opts); err == nil || !strings.Contains(err.Error(), "no admin token: write it to "+work) {
		t.Fatalf("Provision without a token: %v", err)
	}
	if err := os.WriteFile(filepath.Join(work, "admin-token"), []byte("admin-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Generation 3 asks for the user id first and passes it; the older
	// ones leave the plugin to name the user.
	setUserID(t, p, opts, nil)
	photos.Spec.AdditionalConfig = map[string]string{"maxSize": "5G"}
	ob, err := p.Provision(opts)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	ep := ob.Spec.Endpoint
	if ep.BucketName != "photos-1" || ep.BucketHost != "s3.local" || ep.BucketPort != 9000 || ep.Region != "eu-1" {
		t.Fatalf("Provision endpoint: %+v", ep)
	}
	// What the library writes into the claim's Secret.
	secret := ob.Spec.Authentication.ToMap()
	if secret[v1alpha1.AwsKeyField] != "AK-obc-web-photos" || secret[v1alpha1.AwsSecretField] != "SK-obc-web-photos" {
		t.Fatalf("Provision credentials: %v", secret)
	}
	if ob.Spec.AdditionalState["user"] != "obc-web-photos" || ob.Spec.AdditionalState["adminUrl"] != srv.URL {
		t.Fatalf("Provision additionalState: %v", ob.Spec.AdditionalState)
	}
	if ep.AdditionalConfigData["maxSize"] != "5G" || s3.config("photos-1")["maxSize"] != "5G" {
		t.Fatalf("Provision additionalConfig: %v, applied %v", ep.AdditionalConfigData, s3.config("photos-1"))
	}
	// Every reconcile provisions again: the same bucket and keys.
	again, err := p.Provision(opts)
	if b, u, _ := s3.state(); err != nil || again.Spec.Authentication.AccessKeys.AccessKeyID != "AK-obc-web-photos" || b != 1 || u != 1 {
		t.Fatalf("Provision again: %v, %d buckets %d users", err, b, u)
	}
	// The ObjectBucket known, the user id stays the same.
	setUserID(t, p, opts, ob)

	// Brownfield: another claim is granted the existing bucket.
	viewer := claim("viewer")
	grant := &api.BucketOptions{BucketName: "photos-1", ObjectBucketClaim: viewer, Parameters: params}
	setUserID(t, p, grant, nil)
	gob, err := p.Grant(grant)
	if err != nil || gob.Spec.Authentication.AccessKeys.SecretAccessKey != "SK-obc-web-viewer" || gob.Spec.ReclaimPolicy != nil {
		t.Fatalf("Grant: %+v %v", gob, err)
	}

	// Deletion: the brownfield claim is revoked, the greenfield one with
	// reclaimPolicy Delete is deleted; both again are no-ops.
	for i := 0; i < 2; i++ {
		if err := p.Revoke(readBack(t, gob, viewer, corev1.PersistentVolumeReclaimRetain)); err != nil {
			t.Fatalf("Revoke #%d: %v", i+1, err)
		}
	}
	if _, _, g := s3.state(); g != 1 {
		t.Fatalf("Revoke left %d grants, want the owner's only", g)
	}
	for i := 0; i < 2; i++ {
		if err := p.Delete(readBack(t, ob, photos, deletePolicy)); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if b, _, _ := s3.state(); b != 0 {
		t.Fatalf("Delete left %d buckets", b)
	}
	if !strings.Contains(logs.String(), "task=web/photos") {
		t.Errorf("the plugin's log lines do not name the claim: %s", logs.String())
	}
	if strings.Contains(logs.String(), "SK-obc-web-photos") {
		t.Errorf("a secret key reached the log: %s", logs.String())
	}
}

// TestProvisionerErrors checks the contract's error semantics as the
// library sees them.
func TestProvisionerErrors(t *testing.T) {
	s3 := newStore()
	s3.buckets["taken"] = "obc-other-team"
	srv := httptest.NewServer(s3)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p, work := newProvisioner(t, Options{Context: ctx})
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "admin-token"), []byte("admin-token-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	params := map[string]string{"adminUrl": srv.URL}

	// A name another owner holds is the library's BucketExistsErr.
	ob, err := p.Provision(&api.BucketOptions{BucketName: "taken", ObjectBucketClaim: claim("photos"), Parameters: params})
	// No ObjectBucket with the error: generation 1's cleanup deletes a
	// greenfield bucket it gets back, and this one is another's.
	if ob != nil {
		t.Fatalf("Provision of a taken name returned an ObjectBucket: %+v", ob)
	}
	if !apierrors.IsBucketExists(err) || !strings.Contains(err.Error(), "belongs to obc-other-team") || !strings.Contains(err.Error(), "hook provision for web/photos") {
		t.Fatalf("Provision of a taken name: %T %v, want BucketExistsErr", err, err)
	}
	// A brownfield bucket that does not exist: a plain error, retried.
	_, err = p.Grant(&api.BucketOptions{BucketName: "nope", ObjectBucketClaim: claim("photos"), Parameters: params})
	var ce *kindcall.Error
	if !errors.As(err, &ce) || ce.Class != runtime.ClassRetry || apierrors.IsBucketExists(err) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Grant of a missing bucket: %v", err)
	}
	// An ObjectBucket s3like did not provision cannot be deleted: a retry
	// (the library has no terminal errors) saying what to fix.
	err = p.Delete(&v1alpha1.ObjectBucket{ObjectMeta: metav1.ObjectMeta{Name: "obc-web-old"}})
	if !errors.As(err, &ce) || ce.Class != runtime.ClassRetry || !strings.Contains(err.Error(), "ObjectBucket obc-web-old has no additionalState") {
		t.Fatalf("Delete of a foreign ObjectBucket: %v", err)
	}
	// Options without the claim never reach Lua.
	if _, err := p.Provision(&api.BucketOptions{BucketName: "b"}); err == nil || !strings.Contains(err.Error(), "ObjectBucketClaim") {
		t.Fatalf("Provision without a claim: %v", err)
	}
	// The controller shutting down cancels the call.
	cancel()
	if _, err := p.Provision(&api.BucketOptions{BucketName: "b2", ObjectBucketClaim: claim("c2"), Parameters: params}); !errors.Is(err, runtime.ErrCancelled) {
		t.Fatalf("Provision after cancel: %v, want ErrCancelled", err)
	}
}
