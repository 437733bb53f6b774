//go:build bucketgen2 && !bucketgen1

package bucketprovisioner

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
	corev1 "k8s.io/api/core/v1"

	"github.com/loomrt/loom/runtime/kindcall"
)

// setUserID: generation 2 has no user ids.
func setUserID(*testing.T, *Provisioner, *api.BucketOptions, *v1alpha1.ObjectBucket) {}

// TestUpdate drives Update as generation 2's controller does when a
// claim's spec.additionalConfig changes: the ObjectBucket read back, its
// endpoint.additionalConfig set to the claim's new config, Update; when
// storing the ObjectBucket then fails, Update again with the previous
// config.
func TestUpdate(t *testing.T) {
	if Generation != 2 {
		t.Fatalf("Generation %d", Generation)
	}
	s3 := newStore()
	srv := httptest.NewServer(s3)
	defer srv.Close()
	p, work := newProvisioner(t, Options{})
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "admin-token"), []byte("admin-token-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	photos := claim("photos")
	photos.Spec.AdditionalConfig = map[string]string{"maxSize": "5G"}
	ob, err := p.Provision(&api.BucketOptions{BucketName: "photos-1", ObjectBucketClaim: photos,
		Parameters: map[string]string{"adminUrl": srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	back := readBack(t, ob, photos, corev1.PersistentVolumeReclaimDelete)
	old := back.Spec.Endpoint.AdditionalConfigData
	back.Spec.Endpoint.AdditionalConfigData = map[string]string{"maxSize": "20G", "versioning": "on"}
	if err := p.Update(back); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if c := s3.config("photos-1"); c["maxSize"] != "20G" || c["versioning"] != "on" {
		t.Fatalf("after Update: %v", c)
	}
	// The library failed to store the ObjectBucket: it reverts.
	back.Spec.Endpoint.AdditionalConfigData = old
	if err := p.Update(back); err != nil || s3.config("photos-1")["maxSize"] != "5G" {
		t.Fatalf("reverting Update: %v, %v", err, s3.config("photos-1"))
	}
	// A bucket that is gone: a plain error, retried.
	s3.mu.Lock()
	delete(s3.buckets, "photos-1")
	s3.mu.Unlock()
	var ce *kindcall.Error
	if err := p.Update(back); !errors.As(err, &ce) || !strings.Contains(err.Error(), "hook update for web/photos") || !strings.Contains(err.Error(), "bucket photos-1 does not exist") {
		t.Fatalf("Update of a deleted bucket: %v", err)
	}
}
