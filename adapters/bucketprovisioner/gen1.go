//go:build bucketgen1 && !bucketgen2

package bucketprovisioner

import (
	"github.com/kube-object-storage/lib-bucket-provisioner/pkg/provisioner/api"
)

// Generation is the lib-bucket-provisioner interface generation this
// build implements: 1 (-tags bucketgen1), the library's only tag,
// kubernetes-v1.14.1 (Provision, Grant, Delete, Revoke).
const Generation = 1

var _ api.Provisioner = (*Provisioner)(nil)

// userID: generation 1 has no user ids; the plugin names the user.
func userID(*api.BucketOptions) string { return "" }
