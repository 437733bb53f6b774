//go:build bucketgen1 && !bucketgen2

package bucketprovisioner

import (
	"testing"

	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
)

// setUserID: generation 1 has no user ids.
func setUserID(*testing.T, *Provisioner, *api.BucketOptions, *v1alpha1.ObjectBucket) {}

func TestGeneration1(t *testing.T) {
	if Generation != 1 {
		t.Fatalf("Generation %d", Generation)
	}
}
