//go:build !bucketgen1 && !bucketgen2

package bucketprovisioner

import (
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
)

// Generation is the lib-bucket-provisioner interface generation this
// build implements: 3, the library's HEAD (the default build).
const Generation = 3

var _ api.Provisioner = (*Provisioner)(nil)

// GenerateUserID runs generate_user_id with {claim, object_bucket} (the
// ObjectBucket is absent on the first reconcile). Without the hook the
// answer is "obc-<namespace>-<name>", stable across calls as the library
// requires.
func (p *Provisioner) GenerateUserID(obc *v1alpha1.ObjectBucketClaim, ob *v1alpha1.ObjectBucket) (string, error) {
	in := map[string]any{"claim": obc}
	if ob != nil {
		in["object_bucket"] = ob
	}
	var id string
	if err := p.call("generate_user_id", claimID(obc), in, &id); err != nil {
		return "", err
	}
	return id, nil
}

// userID is the user GenerateUserID gave the claim (generation 3 sets
// it in the options).
func userID(o *api.BucketOptions) string { return o.UserID }
