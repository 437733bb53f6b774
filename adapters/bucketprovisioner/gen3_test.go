//go:build !bucketgen1 && !bucketgen2

package bucketprovisioner

import (
	"testing"

	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
)

// setUserID does what generation 3 does before Provision and Grant: ask
// GenerateUserID (with the ObjectBucket once there is one) and pass the
// id in the options. The id must not change across calls.
func setUserID(t *testing.T, p *Provisioner, o *api.BucketOptions, ob *v1alpha1.ObjectBucket) {
	t.Helper()
	id, err := p.GenerateUserID(o.ObjectBucketClaim, ob)
	want := "obc-" + o.ObjectBucketClaim.Namespace + "-" + o.ObjectBucketClaim.Name
	if err != nil || id != want {
		t.Fatalf("GenerateUserID: %q %v, want %q", id, err, want)
	}
	if o.UserID != "" && o.UserID != id {
		t.Fatalf("GenerateUserID changed its answer: %q, then %q", o.UserID, id)
	}
	o.UserID = id
}

func TestGeneration3(t *testing.T) {
	if Generation != 3 {
		t.Fatalf("Generation %d", Generation)
	}
}
