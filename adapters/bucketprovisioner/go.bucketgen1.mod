// The module's requirements for generation 1 of lib-bucket-provisioner (its only tag, kubernetes-v1.14.1) and the 2019 Kubernetes
// libraries that tag pins. Build and test
// that generation with: go test -modfile=go.bucketgen1.mod -tags bucketgen1 ./...
// (make adapters does); go.mod is generation 3, the default build.
module github.com/loomrt/loom/adapters/bucketprovisioner

go 1.26.8

require (
	github.com/kube-object-storage/lib-bucket-provisioner v0.0.0-20191209225510-8423df408133
	github.com/loomrt/loom v0.0.0-00010101000000-000000000000
	k8s.io/api v0.0.0-20190409021203-6e4e0e4f393b
	k8s.io/apimachinery v0.0.0-20190404173353-6a84e37a896d
)

require (
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/google/gofuzz v1.1.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kr/fs v0.1.0 // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/pkg/sftp v1.13.12 // indirect
	github.com/yuin/gopher-lua v1.1.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	k8s.io/klog v1.0.0 // indirect
	layeh.com/gopher-luar v1.0.11 // indirect
)

// The adapter builds against the Loom checkout it lives in; gopher-lua is
// the repository's patched copy (a main module's replace directives do not
// apply to its dependents, so this module repeats it).
replace (
	github.com/loomrt/loom => ../..
	github.com/yuin/gopher-lua => ../../third_party/gopher-lua
)
