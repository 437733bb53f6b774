package ec2fake

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// apiError is an EC2 error answer.
type apiError struct {
	status     int
	code, msg  string
	retryAfter int
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func badValue(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf(format, args...)}
}

func combination(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "InvalidParameterCombination", msg: fmt.Sprintf(format, args...)}
}

// allowed are the parameters each action takes (the fake's subset of
// the API reference's request parameters); anything else is EC2's
// UnknownParameter.
var allowed = map[string][]*regexp.Regexp{
	"RunInstances": patterns(
		`ImageId`, `InstanceType`, `MinCount`, `MaxCount`, `ClientToken`, `KeyName`, `UserData`, `SubnetId`,
		`SecurityGroup\.\d+`, `SecurityGroupId\.\d+`, `DryRun`, `EbsOptimized`, `Monitoring\.Enabled`,
		`InstanceInitiatedShutdownBehavior`, `DisableApiTermination`,
		`Placement\.(AvailabilityZone|GroupName|Tenancy)`, `IamInstanceProfile\.(Name|Arn)`,
		`BlockDeviceMapping\.\d+\.DeviceName`, `BlockDeviceMapping\.\d+\.Ebs\.(VolumeSize|VolumeType|DeleteOnTermination|Iops|Throughput|Encrypted)`,
		`TagSpecification\.\d+\.ResourceType`, `TagSpecification\.\d+\.Tag\.\d+\.(Key|Value)`,
		`NetworkInterface\.\d+\.(DeviceIndex|SubnetId|AssociatePublicIpAddress|DeleteOnTermination)`,
		`NetworkInterface\.\d+\.SecurityGroupId\.\d+`,
		`MetadataOptions\.(HttpTokens|HttpEndpoint|HttpPutResponseHopLimit)`,
	),
	"DescribeInstances":  patterns(`InstanceId\.\d+`, `Filter\.\d+\.Name`, `Filter\.\d+\.Value\.\d+`, `MaxResults`, `NextToken`, `DryRun`),
	"TerminateInstances": patterns(`InstanceId\.\d+`, `DryRun`),
	"GetConsoleOutput":   patterns(`InstanceId`, `Latest`, `DryRun`),
	"ImportKeyPair": patterns(`KeyName`, `PublicKeyMaterial`, `DryRun`,
		`TagSpecification\.\d+\.ResourceType`, `TagSpecification\.\d+\.Tag\.\d+\.(Key|Value)`),
	"DescribeKeyPairs": patterns(`KeyName\.\d+`, `KeyPairId\.\d+`, `IncludePublicKey`, `Filter\.\d+\.Name`, `Filter\.\d+\.Value\.\d+`, `DryRun`),
	"DeleteKeyPair":    patterns(`KeyName`, `KeyPairId`, `DryRun`),
	"DescribeImages":   patterns(`ImageId\.\d+`, `Owner\.\d+`, `Filter\.\d+\.Name`, `Filter\.\d+\.Value\.\d+`, `IncludeDeprecated`, `DryRun`),
}

func patterns(ps ...string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(ps))
	for i, p := range ps {
		out[i] = regexp.MustCompile(`^` + p + `$`)
	}
	return out
}

// checkParams refuses parameters the action does not take, and list
// indexes that do not start at 1 or have gaps.
func checkParams(action string, p url.Values) *apiError {
	pats := allowed[action]
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ok := false
		for _, re := range pats {
			ok = ok || re.MatchString(k)
		}
		if !ok {
			return &apiError{status: 400, code: "UnknownParameter", msg: fmt.Sprintf("The parameter %s is not recognized", k)}
		}
		if len(p[k]) != 1 {
			return badValue("The parameter %s is given %d times", k, len(p[k]))
		}
	}
	return nil
}

// indexes returns the list indexes under prefix ("Filter" gives the N of
// Filter.N.*), sorted, and an error when they are not 1..n.
func indexes(p url.Values, prefix string) ([]int, *apiError) {
	seen := map[int]bool{}
	for k := range p {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 {
			return nil, badValue("%s: list index %q is not a positive integer", k, n)
		}
		seen[i] = true
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	for j, i := range out {
		if i != j+1 {
			return nil, badValue("%s.%d: list indexes must count from 1 without gaps", prefix, i)
		}
	}
	return out, nil
}

// list returns the values of prefix.1, prefix.2, ...
func list(p url.Values, prefix string) ([]string, *apiError) {
	idx, err := indexes(p, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = p.Get(fmt.Sprintf("%s.%d", prefix, i))
	}
	return out, nil
}

type filter struct {
	name   string
	values []string
}

func filters(p url.Values) ([]filter, *apiError) {
	idx, err := indexes(p, "Filter")
	if err != nil {
		return nil, err
	}
	var out []filter
	for _, i := range idx {
		pre := fmt.Sprintf("Filter.%d", i)
		vals, err := list(p, pre+".Value")
		if err != nil {
			return nil, err
		}
		name := p.Get(pre + ".Name")
		if name == "" {
			return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter " + pre + ".Name"}
		}
		out = append(out, filter{name: name, values: vals})
	}
	return out, nil
}

type tagSpec struct {
	resourceType string
	tags         []tagXML
}

func tagSpecs(p url.Values, types ...string) ([]tagSpec, *apiError) {
	idx, err := indexes(p, "TagSpecification")
	if err != nil {
		return nil, err
	}
	var out []tagSpec
	seen := map[string]bool{}
	for _, i := range idx {
		pre := fmt.Sprintf("TagSpecification.%d", i)
		rt := p.Get(pre + ".ResourceType")
		ok := false
		for _, t := range types {
			ok = ok || t == rt
		}
		if !ok {
			return nil, badValue("'%s' is not a valid taggable resource type for this operation.", rt)
		}
		if seen[rt] {
			return nil, badValue("The same resource type may not be specified more than once in tag specifications")
		}
		seen[rt] = true
		tidx, err := indexes(p, pre+".Tag")
		if err != nil {
			return nil, err
		}
		ts := tagSpec{resourceType: rt}
		keys := map[string]bool{}
		for _, j := range tidx {
			k := p.Get(fmt.Sprintf("%s.Tag.%d.Key", pre, j))
			v := p.Get(fmt.Sprintf("%s.Tag.%d.Value", pre, j))
			switch {
			case k == "":
				return nil, badValue("Tag key must not be empty")
			case len(k) > 128 || len(v) > 256:
				return nil, badValue("Tag %q: keys are at most 128 and values at most 256 characters", k)
			case strings.HasPrefix(strings.ToLower(k), "aws:"):
				return nil, badValue("Tag keys starting with 'aws:' are reserved for internal use")
			case keys[k]:
				return nil, badValue("Duplicate tag key %q", k)
			}
			keys[k] = true
			ts.tags = append(ts.tags, tagXML{Key: k, Value: v})
		}
		if len(ts.tags) > 50 {
			return nil, badValue("A resource may have at most 50 tags")
		}
		out = append(out, ts)
	}
	return out, nil
}

// boolean reads an xsd:boolean parameter.
func boolean(p url.Values, name string) (bool, *apiError) {
	switch v := p.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, badValue("Invalid value '%s' for %s: must be true or false", v, name)
	}
}
