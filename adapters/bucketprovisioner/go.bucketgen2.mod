// The module's requirements for generation 2 of lib-bucket-provisioner (the last commit before the
// breaking change aa9aebb: Provision, Grant, Delete, Revoke, Update). Build and test
// that generation with: go test -modfile=go.bucketgen2.mod -tags bucketgen2 ./...
// (make adapters does); go.mod is generation 3, the default build.
module github.com/loomrt/loom/adapters/bucketprovisioner

go 1.26.8

require (
	github.com/kube-object-storage/lib-bucket-provisioner v0.0.0-20220811192603-abc54caa34ac
	github.com/loomrt/loom v0.0.0-00010101000000-000000000000
	k8s.io/api v0.23.5
	k8s.io/apimachinery v0.23.5
)

require (
	github.com/go-logr/logr v1.2.3 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/google/go-cmp v0.5.5 // indirect
	github.com/google/gofuzz v1.1.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kr/fs v0.1.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/pkg/sftp v1.13.12 // indirect
	github.com/yuin/gopher-lua v1.1.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	k8s.io/klog/v2 v2.60.1 // indirect
	k8s.io/utils v0.0.0-20211116205334-6203023598ed // indirect
	layeh.com/gopher-luar v1.0.11 // indirect
	sigs.k8s.io/json v0.0.0-20211020170558-c049b76a60c6 // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.2.1 // indirect
)

// The adapter builds against the Loom checkout it lives in; gopher-lua is
// the repository's patched copy (a main module's replace directives do not
// apply to its dependents, so this module repeats it).
replace (
	github.com/loomrt/loom => ../..
	github.com/yuin/gopher-lua => ../../third_party/gopher-lua
)
