//go:build bucketgen2 && !bucketgen1

package bucketprovisioner

import (
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/apis/objectbucket.io/v1alpha1"
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
)

// Generation is the lib-bucket-provisioner interface generation this
// build implements: 2 (-tags bucketgen2), the library from 2021-06 to
// 2022-11 (Update, no GenerateUserID).
const Generation = 2

var _ api.Provisioner = (*Provisioner)(nil)

// Update runs update with {object_bucket}: the library calls it when a
// claim's spec.additionalConfig changed, with the ObjectBucket's
// spec.endpoint.additionalConfig already set to the claim's new one;
// when it then fails to store the ObjectBucket it calls Update again with
// the previous config. Without the hook it succeeds.
func (p *Provisioner) Update(ob *v1alpha1.ObjectBucket) error {
	return p.call("update", obID(ob), map[string]any{"object_bucket": ob}, nil)
}

// userID: generation 2 has no user ids; the plugin names the user.
func userID(*api.BucketOptions) string { return "" }
