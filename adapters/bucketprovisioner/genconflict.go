//go:build bucketgen1 && bucketgen2

package bucketprovisioner

// A build serves one generation of the library's interface.
var _ = the_build_tags_bucketgen1_and_bucketgen2_exclude_each_other
