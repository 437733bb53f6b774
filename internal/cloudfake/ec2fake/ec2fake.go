// Package ec2fake is a strict fake of the Amazon EC2 Query API (version
// 2016-11-15), for the actions Loom's aws provider calls: RunInstances,
// DescribeInstances, TerminateInstances, GetConsoleOutput, DescribeImages,
// ImportKeyPair, DescribeKeyPairs and DeleteKeyPair.
//
// It checks what EC2 checks: the Signature Version 4 of every request
// (AuthFailure otherwise), the parameters each action takes
// (UnknownParameter), their values and combinations (a subnet with
// security group names, network interfaces with instance-level groups),
// ClientToken idempotency (the same reservation again, or
// IdempotentParameterMismatch), and it answers with the documented XML.
// Instances go pending, then running, and when terminated shutting-down,
// then terminated; their console output carries the SSH host keys as
// cloud-init prints them. Faults (RequestLimitExceeded, 5xx, an answer
// lost after the work was done) are queued per action.
//
// The aws provider's Go tests, the end-to-end tests and the conformance
// module (test/ec2conformance, which parses every answer with the AWS SDK
// for Go v2 and checks every signature with its signer) all use it.
package ec2fake

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Options configure a fake. The zero value serves region us-east-1 and
// accepts AccessKeyID "AKIDEXAMPLE" with its secret.
type Options struct {
	// Credentials are the access keys it accepts.
	Credentials []Credentials
	// Region is the region of the endpoint (the credential scope's).
	Region string
	// Now is the server's clock (time.Now when nil).
	Now func() time.Time
	// MaxSkew, when set, refuses requests whose X-Amz-Date is further
	// from Now (RequestExpired); EC2 allows 5 minutes.
	MaxSkew time.Duration
	// PendingReads is how many DescribeInstances answers show a new
	// instance pending before it runs (default 1; -1 means running at
	// once).
	PendingReads int
	// ConsoleAfter is how many GetConsoleOutput calls of a running
	// instance answer without output first (the console is posted a
	// while after boot).
	ConsoleAfter int
	// PageSize, when set, is the most reservations a DescribeInstances
	// answer without instance ids carries; the rest come on later pages
	// behind its nextToken, as EC2 pages large answers. MaxResults (5 to
	// 1,000, not with InstanceId) lowers it.
	PageSize int
	// KeyPairs are the names of key pairs the account has besides
	// "coopr" (KeyPair), for RunInstances' KeyName.
	KeyPairs []string
	// Machines are handed to new instances in order: their addresses
	// and SSH host keys. Past the list, instances get addresses of
	// their own (203.0.113.x public, 10.0.1.x private) and a generated
	// ed25519 host key.
	Machines []Machine
}

// Machine is what a new instance is: its addresses and host keys.
type Machine struct {
	PublicIP, PrivateIP string
	// HostKeys are authorized_keys lines ("ssh-ed25519 AAAA...").
	HostKeys []string
}

// Default credentials and resources.
const (
	AccessKeyID     = "AKIDEXAMPLE"
	SecretAccessKey = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	// DefaultImage is an EBS-backed HVM image (root /dev/xvda, 8 GiB).
	DefaultImage = "ami-0abcdef1234567890"
	// InstanceStoreImage is an instance-store image.
	InstanceStoreImage = "ami-0123456789abcdef0"
	// Subnet is a subnet of VPC vpc-0a1b2c3d4e5f60789 in zone <region>a.
	Subnet = "subnet-0123456789abcdef0"
	// SecurityGroupID is the VPC's "default" group; "default" also
	// names it.
	SecurityGroupID = "sg-0123456789abcdef0"
	// KeyPair is an existing RSA key pair.
	KeyPair = "coopr"
	ownerID = "123456789012"
	vpcID   = "vpc-0a1b2c3d4e5f60789"
)

// Fault is a queued answer for the next request of an action.
type Fault struct {
	// Status and Code make an EC2 error answer (Message optional).
	Status  int
	Code    string
	Message string
	// Apply does the action first, then answers with the fault (or
	// drops the connection): the caller cannot know it succeeded.
	Apply bool
	// Drop closes the connection without an answer.
	Drop bool
}

// Exchange is one request and the fake's answer, as on the wire.
type Exchange struct {
	Action  string
	Params  url.Values
	Method  string
	URL     string // as the server saw it: path and query
	Host    string
	Header  http.Header
	Body    []byte
	Status  int
	RHeader http.Header
	RBody   []byte
	// Dropped is set when the connection was closed without an answer.
	Dropped bool
}

// Instance is the fake's record of an instance.
type Instance struct {
	ID, ImageID, Type, KeyName, ClientToken, SubnetID, AZ string
	PublicIP, PrivateIP, PrivateDNS, PublicDNS            string
	State                                                 string
	Tags                                                  []tagXML
	Groups                                                []groupXML
	UserData                                              string
	RootSize                                              int
	RootType                                              string
	HostKeys                                              []string
	Launched                                              time.Time
	reads, consoleReads                                   int
	params                                                string // digest of the RunInstances parameters
	reservation                                           string
}

// Tag returns the value of tag k.
func (i *Instance) Tag(k string) string {
	for _, t := range i.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return ""
}

type keyPair struct {
	id, name, fingerprint, typ, public string
	tags                               []tagXML
	created                            time.Time
}

type image struct {
	id, rootType, rootDevice string
	size                     int
}

// Server is a running fake.
type Server struct {
	o   Options
	srv *httptest.Server

	mu        sync.Mutex
	exchanges []Exchange
	faults    map[string][]Fault
	instances map[string]*Instance
	order     []string
	keyPairs  map[string]*keyPair
	images    map[string]image
	groups    map[string]string // name -> id
	subnets   map[string]string // id -> az suffix
	types     map[string]bool
	seq       int
	machines  int
}

// Start starts a fake on a loopback port. Close it when done.
func Start(o Options) *Server {
	s := New(o)
	s.srv = httptest.NewServer(s)
	return s
}

// New returns a fake to serve with its ServeHTTP.
func New(o Options) *Server {
	if len(o.Credentials) == 0 {
		o.Credentials = []Credentials{{AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey}}
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PendingReads == 0 {
		o.PendingReads = 1
	}
	s := &Server{o: o, faults: map[string][]Fault{}, instances: map[string]*Instance{}, keyPairs: map[string]*keyPair{},
		images: map[string]image{
			DefaultImage:       {id: DefaultImage, rootType: "ebs", rootDevice: "/dev/xvda", size: 8},
			InstanceStoreImage: {id: InstanceStoreImage, rootType: "instance-store", rootDevice: "/dev/sda1"},
		},
		groups:  map[string]string{"default": SecurityGroupID},
		subnets: map[string]string{Subnet: "a"},
		types: map[string]bool{"t2.micro": true, "t3.micro": true, "t3.small": true, "t3.medium": true, "m3.medium": true,
			"m5.large": true, "m5.xlarge": true, "c5.large": true, "r5.large": true},
	}
	pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(coopRSAKey))
	s.keyPairs[KeyPair] = &keyPair{id: "key-0c0c0c0c0c0c0c0c0", name: KeyPair, fingerprint: ssh.FingerprintLegacyMD5(pub), typ: "rsa",
		public: coopRSAKey, created: o.Now()}
	for i, n := range o.KeyPairs {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		sp, _ := ssh.NewPublicKey(pub)
		sum := sha256.Sum256(sp.Marshal())
		s.keyPairs[n] = &keyPair{id: fmt.Sprintf("key-%017x", 0x0c000000000000000+uint64(i+1)), name: n, typ: "ed25519",
			fingerprint: base64.StdEncoding.EncodeToString(sum[:]), public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))), created: o.Now()}
	}
	return s
}

// coopRSAKey is the public half of the seeded "coopr" key pair.
const coopRSAKey = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCqJPRf/3MD7jdD254VqlrhKLbwcFNAAxs9EH8Yc/5HatB+7Z3k1U80W53//z4UiRbhn7BYg0RUQ9uTkJxomKGJP2xGhhAOX6wZkeGtYHE976YTjX4jep3gVX5pK7Kc0nyfVg3aWtbgLMssRTjblL0q+ui3hciuna0ATqKDKUNbSV6sRC083iXj15JHjUoDiBCwdP4/S0opidypOTDORfC51L12Dm7BfKTplg7tKrn9RqcAsg+10HxXKB+XCxyGFc0WefoW51xfh/iiflJIBJszgNiWv0TObOyt5KGE/94NitKBP2gGyYGS23hVVvZ5x4MYQZ73Xx+Tuj+ImiXkqerL coopr"

// URL is the fake's base URL (Start only).
func (s *Server) URL() string { return s.srv.URL }

// Close stops a started fake.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// FailNext queues f for the next request of action.
func (s *Server) FailNext(action string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[action] = append(s.faults[action], f)
}

// Exchanges returns what the fake received and answered, in order;
// action "" means every action.
func (s *Server) Exchanges(action string) []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Exchange
	for _, e := range s.exchanges {
		if action == "" || e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

// Instances returns the instances in launch order, terminated ones too.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, *s.instances[id])
	}
	return out
}

// Live returns the instances that are not terminated or shutting down.
func (s *Server) Live() []Instance {
	var out []Instance
	for _, i := range s.Instances() {
		if i.State != "terminated" && i.State != "shutting-down" {
			out = append(out, i)
		}
	}
	return out
}

// Instance returns the instance with id, if any.
func (s *Server) Instance(id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.instances[id]
	if !ok {
		return Instance{}, false
	}
	return *i, true
}

// SetState moves an instance to state (pending, running, stopped,
// terminated...).
func (s *Server) SetState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.instances[id]; ok {
		i.State = state
	}
}

// KeyPairs returns the key pair names.
func (s *Server) KeyPairs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.keyPairs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	params := r.URL.Query()
	if r.Method == http.MethodPost {
		ct := r.Header.Get("Content-Type")
		if !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			s.record(w, r, body, params, "", &apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("a POST needs Content-Type application/x-www-form-urlencoded, not %q", ct)})
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			s.record(w, r, body, params, "", badValue("the form body does not parse: %v", err))
			return
		}
		for k, v := range form {
			params[k] = append(params[k], v...)
		}
	}
	action := params.Get("Action")
	s.mu.Lock()
	defer s.mu.Unlock()
	if ae := verify(r, body, s.o.Credentials, s.o.Region, s.o.Now(), s.o.MaxSkew); ae != nil {
		status := 401
		if ae.code == "IncompleteSignature" || ae.code == "RequestExpired" {
			status = 400
		}
		if ae.code == "SignatureDoesNotMatch" {
			status = 403
		}
		s.recordLocked(w, r, body, params, action, &apiError{status: status, code: ae.code, msg: ae.msg}, nil, false)
		return
	}
	delete(params, "Action")
	version := params.Get("Version")
	delete(params, "Version")
	var (
		resp any
		aerr *apiError
	)
	switch {
	case action == "":
		aerr = &apiError{status: 400, code: "MissingAction", msg: "The request must contain the parameter Action"}
	case allowed[action] == nil:
		aerr = &apiError{status: 400, code: "InvalidAction", msg: fmt.Sprintf("The action %s is not valid for this web service.", action)}
	case version != "2016-11-15":
		aerr = &apiError{status: 400, code: "NoSuchVersion", msg: fmt.Sprintf("An invalid or out-of-range value %q was supplied for the Version parameter (this fake serves 2016-11-15)", version)}
	default:
		aerr = checkParams(action, params)
	}
	if aerr == nil {
		if dry, _ := boolean(params, "DryRun"); dry {
			aerr = &apiError{status: 412, code: "DryRunOperation", msg: "Request would have succeeded, but DryRun flag is set."}
		}
	}
	drop := false
	if aerr == nil {
		if q := s.faults[action]; len(q) > 0 {
			f := q[0]
			s.faults[action] = q[1:]
			if f.Apply {
				s.apply(action, params)
			}
			drop = f.Drop
			if f.Code != "" {
				msg := f.Message
				if msg == "" {
					msg = defaultMessage(f.Code)
				}
				aerr = &apiError{status: f.Status, code: f.Code, msg: msg}
			}
			if !drop && aerr == nil {
				aerr = &apiError{status: 500, code: "InternalError", msg: "An internal error has occurred"}
			}
		}
	}
	if aerr == nil && !drop {
		resp, aerr = s.apply(action, params)
	}
	s.recordLocked(w, r, body, params, action, aerr, resp, drop)
}

func defaultMessage(code string) string {
	switch code {
	case "RequestLimitExceeded":
		return "Request limit exceeded."
	case "InternalError":
		return "An internal error has occurred"
	case "Unavailable":
		return "The service is unavailable. Please try again shortly."
	case "InsufficientInstanceCapacity":
		return "We currently do not have sufficient capacity in the Availability Zone you requested."
	}
	return code
}

func (s *Server) record(w http.ResponseWriter, r *http.Request, body []byte, params url.Values, action string, aerr *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(w, r, body, params, action, aerr, nil, false)
}

// recordLocked writes the answer (an error, a response, or a dropped
// connection) and records the exchange.
func (s *Server) recordLocked(w http.ResponseWriter, r *http.Request, body []byte, params url.Values, action string, aerr *apiError, resp any, drop bool) {
	s.seq++
	reqID := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", s.seq*2654435761&0xffffffff, s.seq&0xffff, s.seq&0xfff, s.seq&0xfff, s.seq)
	e := Exchange{Action: action, Params: params, Method: r.Method, URL: r.URL.RequestURI(), Host: r.Host,
		Header: r.Header.Clone(), Body: body, Dropped: drop}
	if drop {
		s.exchanges = append(s.exchanges, e)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	var out []byte
	status := 200
	if aerr != nil {
		status = aerr.status
		out, _ = xml.Marshal(errorResponse{Errors: []errorXML{{Code: aerr.code, Message: aerr.msg}}, RequestID: reqID})
	} else {
		setRequestID(resp, reqID)
		out, _ = xml.Marshal(resp)
	}
	out = append([]byte(xml.Header), out...)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(status)
	w.Write(out)
	e.Status, e.RHeader, e.RBody = status, w.Header().Clone(), out
	s.exchanges = append(s.exchanges, e)
}

func setRequestID(resp any, id string) {
	switch r := resp.(type) {
	case *runInstancesResponse:
		r.RequestID = id
	case *describeInstancesResponse:
		r.RequestID = id
	case *terminateInstancesResponse:
		r.RequestID = id
	case *consoleOutputResponse:
		r.RequestID = id
	case *importKeyPairResponse:
		r.RequestID = id
	case *describeKeyPairsResponse:
		r.RequestID = id
	case *deleteKeyPairResponse:
		r.RequestID = id
	case *describeImagesResponse:
		r.RequestID = id
	}
}

// apply does an action (its parameters already checked by name).
func (s *Server) apply(action string, p url.Values) (any, *apiError) {
	switch action {
	case "RunInstances":
		return s.runInstances(p)
	case "DescribeInstances":
		return s.describeInstances(p)
	case "TerminateInstances":
		return s.terminateInstances(p)
	case "GetConsoleOutput":
		return s.consoleOutput(p)
	case "ImportKeyPair":
		return s.importKeyPair(p)
	case "DescribeKeyPairs":
		return s.describeKeyPairs(p)
	case "DeleteKeyPair":
		return s.deleteKeyPair(p)
	case "DescribeImages":
		return s.describeImages(p)
	}
	return nil, &apiError{status: 400, code: "InvalidAction", msg: action}
}

var (
	instanceIDRe = regexp.MustCompile(`^i-[0-9a-f]{8}([0-9a-f]{9})?$`)
	amiRe        = regexp.MustCompile(`^ami-[0-9a-f]{8}([0-9a-f]{9})?$`)
	sgIDRe       = regexp.MustCompile(`^sg-[0-9a-f]{8}([0-9a-f]{9})?$`)
	subnetRe     = regexp.MustCompile(`^subnet-[0-9a-f]{8}([0-9a-f]{9})?$`)
	tokenRe      = regexp.MustCompile(`^[\x20-\x7e]{1,64}$`)
)

func (s *Server) runInstances(p url.Values) (any, *apiError) {
	for _, req := range []string{"ImageId", "MinCount", "MaxCount"} {
		if p.Get(req) == "" {
			return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter " + req}
		}
	}
	if p.Get("MinCount") != "1" || p.Get("MaxCount") != "1" {
		return nil, badValue("this fake launches one instance at a time: MinCount and MaxCount must be 1, got %s and %s", p.Get("MinCount"), p.Get("MaxCount"))
	}
	token := p.Get("ClientToken")
	if token != "" && !tokenRe.MatchString(token) {
		return nil, badValue("Value (%s) for parameter clientToken is invalid. Client tokens are at most 64 printable ASCII characters.", token)
	}
	digest := paramsDigest(p)
	if token != "" {
		for _, id := range s.order {
			i := s.instances[id]
			if i.ClientToken != token {
				continue
			}
			if i.params != digest {
				return nil, &apiError{status: 400, code: "IdempotentParameterMismatch",
					msg: "The client token you have provided is associated with a resource that is already deleted or has different parameters. Please use a different client token."}
			}
			return &runInstancesResponse{ReservationID: i.reservation, OwnerID: ownerID, Instances: []instanceXML{s.instanceXML(i)}}, nil
		}
	}
	img := p.Get("ImageId")
	if !amiRe.MatchString(img) {
		return nil, &apiError{status: 400, code: "InvalidAMIID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"ami-...\")", img)}
	}
	im, ok := s.images[img]
	if !ok {
		return nil, &apiError{status: 400, code: "InvalidAMIID.NotFound", msg: fmt.Sprintf("The image id '[%s]' does not exist", img)}
	}
	typ := p.Get("InstanceType")
	if typ == "" {
		typ = "m1.small"
	}
	if !s.types[typ] {
		return nil, badValue("Invalid value '%s' for InstanceType.", typ)
	}
	key := p.Get("KeyName")
	if key != "" && s.keyPairs[key] == nil {
		return nil, &apiError{status: 400, code: "InvalidKeyPair.NotFound", msg: fmt.Sprintf("The key pair '%s' does not exist", key)}
	}
	names, err := list(p, "SecurityGroup")
	if err != nil {
		return nil, err
	}
	ids, err := list(p, "SecurityGroupId")
	if err != nil {
		return nil, err
	}
	nics, err := indexes(p, "NetworkInterface")
	if err != nil {
		return nil, err
	}
	subnet := p.Get("SubnetId")
	if len(nics) > 0 {
		if len(nics) > 1 {
			return nil, badValue("this fake takes one network interface")
		}
		if subnet != "" {
			return nil, combination("Network interfaces and an instance-level subnet ID may not be specified on the same request")
		}
		if len(ids) > 0 || len(names) > 0 {
			return nil, combination("Network interfaces and an instance-level security groups may not be specified on the same request")
		}
		if p.Get("NetworkInterface.1.DeviceIndex") != "0" {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Each network interface requires a device index; the first must be 0."}
		}
		subnet = p.Get("NetworkInterface.1.SubnetId")
		if subnet == "" {
			return nil, combination("A network interface needs a SubnetId here")
		}
		if ids, err = list(p, "NetworkInterface.1.SecurityGroupId"); err != nil {
			return nil, err
		}
		if _, err := boolean(p, "NetworkInterface.1.AssociatePublicIpAddress"); err != nil {
			return nil, err
		}
	}
	if subnet != "" {
		if !subnetRe.MatchString(subnet) {
			return nil, &apiError{status: 400, code: "InvalidSubnetID.Malformed", msg: fmt.Sprintf("The subnet ID '%s' is malformed", subnet)}
		}
		if _, ok := s.subnets[subnet]; !ok {
			return nil, &apiError{status: 400, code: "InvalidSubnetID.NotFound", msg: fmt.Sprintf("The subnet ID '%s' does not exist", subnet)}
		}
		if len(names) > 0 {
			return nil, combination("The parameter groupName cannot be used with the parameter subnet")
		}
	}
	var groups []groupXML
	for _, n := range names {
		id, ok := s.groups[n]
		if !ok {
			return nil, &apiError{status: 400, code: "InvalidGroup.NotFound", msg: fmt.Sprintf("The security group '%s' does not exist in default VPC '%s'", n, vpcID)}
		}
		groups = append(groups, groupXML{GroupID: id, GroupName: n})
	}
	for _, id := range ids {
		if !sgIDRe.MatchString(id) {
			return nil, &apiError{status: 400, code: "InvalidGroupId.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"sg-...\")", id)}
		}
		name := ""
		for n, gid := range s.groups {
			if gid == id {
				name = n
			}
		}
		if name == "" {
			return nil, &apiError{status: 400, code: "InvalidGroup.NotFound", msg: fmt.Sprintf("The security group '%s' does not exist", id)}
		}
		groups = append(groups, groupXML{GroupID: id, GroupName: name})
	}
	if len(groups) == 0 {
		groups = []groupXML{{GroupID: SecurityGroupID, GroupName: "default"}}
	}
	az := s.o.Region + "a"
	if subnet != "" {
		az = s.o.Region + s.subnets[subnet]
	}
	if v := p.Get("Placement.AvailabilityZone"); v != "" {
		if !strings.HasPrefix(v, s.o.Region) || len(v) != len(s.o.Region)+1 {
			return nil, badValue("Invalid availability zone: [%s]", v)
		}
		if subnet != "" && v != az {
			return nil, combination("The specified Availability Zone %s is not the subnet's (%s)", v, az)
		}
		az = v
	}
	if t := p.Get("Placement.Tenancy"); t != "" && t != "default" && t != "dedicated" && t != "host" {
		return nil, badValue("Invalid value '%s' for tenancy", t)
	}
	userData := p.Get("UserData")
	if userData != "" {
		raw, err := base64.StdEncoding.DecodeString(userData)
		if err != nil {
			return nil, badValue("Invalid BASE64 encoding of user data.")
		}
		if len(raw) > 16384 {
			return nil, badValue("User data is limited to 16384 bytes")
		}
	}
	specs, aerr := tagSpecs(p, "instance", "volume", "network-interface")
	if aerr != nil {
		return nil, aerr
	}
	rootSize, rootType := im.size, "gp2"
	bdms, aerr := indexes(p, "BlockDeviceMapping")
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range bdms {
		pre := fmt.Sprintf("BlockDeviceMapping.%d", n)
		dev := p.Get(pre + ".DeviceName")
		if dev == "" {
			return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter " + pre + ".DeviceName"}
		}
		size := 0
		if v := p.Get(pre + ".Ebs.VolumeSize"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 16384 {
				return nil, &apiError{status: 400, code: "InvalidBlockDeviceMapping", msg: fmt.Sprintf("Invalid volume size %s", v)}
			}
			size = n
		}
		vt := p.Get(pre + ".Ebs.VolumeType")
		if vt != "" && !slices.Contains([]string{"standard", "gp2", "gp3", "io1", "io2", "st1", "sc1"}, vt) {
			return nil, badValue("Value (%s) for parameter volumeType is invalid. Valid values are standard, gp2, gp3, io1, io2, st1, sc1.", vt)
		}
		if _, err := boolean(p, pre+".Ebs.DeleteOnTermination"); err != nil {
			return nil, err
		}
		if dev == im.rootDevice {
			if im.rootType != "ebs" {
				return nil, &apiError{status: 400, code: "InvalidBlockDeviceMapping", msg: "The root device of an instance-store image cannot be changed"}
			}
			if size != 0 && size < im.size {
				return nil, &apiError{status: 400, code: "InvalidBlockDeviceMapping",
					msg: fmt.Sprintf("Volume of size %dGB is smaller than snapshot 'snap-0ff0ff0ff0ff0ff00', expect size >= %dGB", size, im.size)}
			}
			if size != 0 {
				rootSize = size
			}
			if vt != "" {
				rootType = vt
			}
		}
	}
	if prof := p.Get("IamInstanceProfile.Name"); prof != "" && strings.ContainsAny(prof, " /") {
		return nil, badValue("Value (%s) for parameter iamInstanceProfile.name is invalid.", prof)
	}

	n := len(s.order) + 1
	id := fmt.Sprintf("i-%017x", 0x0a000000000000000+uint64(n))
	m := s.nextMachine()
	inst := &Instance{ID: id, ImageID: img, Type: typ, KeyName: key, ClientToken: token, SubnetID: subnet, AZ: az,
		PublicIP: m.PublicIP, PrivateIP: m.PrivateIP, State: "pending", Groups: groups, UserData: userData,
		RootSize: rootSize, RootType: rootType, HostKeys: m.HostKeys, Launched: s.o.Now().UTC(), params: digest,
		reservation: fmt.Sprintf("r-%017x", 0x0b000000000000000+uint64(n))}
	inst.PrivateDNS = "ip-" + strings.ReplaceAll(inst.PrivateIP, ".", "-") + ".ec2.internal"
	if len(nics) > 0 {
		if pub, _ := boolean(p, "NetworkInterface.1.AssociatePublicIpAddress"); !pub {
			inst.PublicIP = ""
		}
	}
	if inst.PublicIP != "" {
		inst.PublicDNS = "ec2-" + strings.ReplaceAll(inst.PublicIP, ".", "-") + ".compute-1.amazonaws.com"
	}
	for _, sp := range specs {
		if sp.resourceType == "instance" {
			inst.Tags = sp.tags
		}
	}
	if s.o.PendingReads < 0 {
		inst.State = "running"
	}
	s.instances[id] = inst
	s.order = append(s.order, id)
	return &runInstancesResponse{ReservationID: inst.reservation, OwnerID: ownerID, Groups: nil, Instances: []instanceXML{s.instanceXML(inst)}}, nil
}

// paramsDigest identifies a RunInstances request but for its
// ClientToken, for idempotency.
func paramsDigest(p url.Values) string {
	q := url.Values{}
	for k, v := range p {
		if k != "ClientToken" {
			q[k] = v
		}
	}
	sum := sha256.Sum256([]byte(q.Encode()))
	return fmt.Sprintf("%x", sum[:8])
}

func (s *Server) nextMachine() Machine {
	s.machines++
	n := s.machines
	var m Machine
	if n <= len(s.o.Machines) {
		m = s.o.Machines[n-1]
	}
	if m.PublicIP == "" && n > len(s.o.Machines) {
		m.PublicIP = fmt.Sprintf("203.0.113.%d", 10+n)
	}
	if m.PrivateIP == "" {
		m.PrivateIP = fmt.Sprintf("10.0.1.%d", 10+n)
	}
	if len(m.HostKeys) == 0 {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		sp, _ := ssh.NewPublicKey(pub)
		m.HostKeys = []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))}
	}
	return m
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func (s *Server) instanceXML(i *Instance) instanceXML {
	im := s.images[i.ImageID]
	x := instanceXML{InstanceID: i.ID, ImageID: i.ImageID, State: stateXML{Code: stateCodes[i.State], Name: i.State},
		KeyName: i.KeyName, InstanceType: i.Type, LaunchTime: i.Launched.Format(timeFormat),
		Placement: placementXML{AvailabilityZone: i.AZ, Tenancy: "default"}, Monitoring: monitoringXML{State: "disabled"},
		SubnetID: i.SubnetID, PrivateIP: i.PrivateIP, PrivateDNSName: i.PrivateDNS, SourceDestCheck: true, Groups: i.Groups,
		Architecture: "x86_64", RootDeviceType: im.rootType, RootDeviceName: im.rootDevice, VirtualizationType: "hvm",
		ClientToken: i.ClientToken, Tags: i.Tags, Hypervisor: "xen"}
	// Every instance is in a VPC: the default VPC's subnet when the
	// request named none.
	x.VpcID = vpcID
	if x.SubnetID == "" {
		x.SubnetID = "subnet-0fedcba9876543210"
	}
	if i.State == "running" || i.State == "stopping" {
		x.PublicIP, x.DNSName = i.PublicIP, i.PublicDNS
	}
	if i.State == "terminated" || i.State == "shutting-down" {
		x.StateReason = &reasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
		x.Reason = "User initiated (" + s.o.Now().UTC().Format("2006-01-02 15:04:05 MST") + ")"
		x.PrivateIP, x.PrivateDNSName = "", ""
	}
	if im.rootType == "ebs" && i.State != "terminated" {
		x.BlockDevices = []instanceBDMXML{{DeviceName: im.rootDevice, Ebs: ebsXML{VolumeID: "vol-" + i.ID[2:], Status: "attached",
			AttachTime: i.Launched.Format(timeFormat), DeleteOnTermination: true}}}
	}
	return x
}

func (s *Server) lookupIDs(ids []string) ([]*Instance, *apiError) {
	var out []*Instance
	var missing []string
	for _, id := range ids {
		if !instanceIDRe.MatchString(id) {
			return nil, &apiError{status: 400, code: "InvalidInstanceID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\"", id)}
		}
		i, ok := s.instances[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		out = append(out, i)
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("The instance ID '%s' does not exist", missing[0])
		if len(missing) > 1 {
			msg = fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(missing, ", "))
		}
		return nil, &apiError{status: 400, code: "InvalidInstanceID.NotFound", msg: msg}
	}
	return out, nil
}

func (s *Server) describeInstances(p url.Values) (any, *apiError) {
	ids, aerr := list(p, "InstanceId")
	if aerr != nil {
		return nil, aerr
	}
	fs, aerr := filters(p)
	if aerr != nil {
		return nil, aerr
	}
	for _, f := range fs {
		switch {
		case f.name == "instance-state-name", f.name == "client-token", f.name == "instance-id", strings.HasPrefix(f.name, "tag:"):
		default:
			return nil, badValue("The filter '%s' is invalid", f.name)
		}
	}
	var cands []*Instance
	if len(ids) > 0 {
		if cands, aerr = s.lookupIDs(ids); aerr != nil {
			return nil, aerr
		}
	} else {
		for _, id := range s.order {
			cands = append(cands, s.instances[id])
		}
	}
	start, size, aerr := s.page(p, len(ids) > 0)
	if aerr != nil {
		return nil, aerr
	}
	resp := &describeInstancesResponse{}
	for _, i := range cands {
		// A read moves the instance along its life, as time does.
		i.reads++
		switch {
		case i.State == "pending" && i.reads > s.o.PendingReads:
			i.State = "running"
		case i.State == "shutting-down":
			i.State = "terminated"
		}
		if !matches(i, fs) {
			continue
		}
		resp.Reservations = append(resp.Reservations, reservationXML{ReservationID: i.reservation, OwnerID: ownerID,
			Instances: []instanceXML{s.instanceXML(i)}})
	}
	// Filters apply before paging, as on EC2: a page holds matches only.
	if size > 0 {
		if start > len(resp.Reservations) {
			start = len(resp.Reservations)
		}
		resp.Reservations = resp.Reservations[start:]
		if len(resp.Reservations) > size {
			resp.Reservations = resp.Reservations[:size]
			resp.NextToken = pageToken(start + size)
		}
	}
	return resp, nil
}

// page reads DescribeInstances' MaxResults and NextToken: where the
// answer starts and how many reservations it holds (0: all).
func (s *Server) page(p url.Values, byID bool) (start, size int, aerr *apiError) {
	size = s.o.PageSize
	if v := p.Get("MaxResults"); v != "" {
		if byID {
			return 0, 0, combination("The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 || n > 1000 {
			return 0, 0, badValue("Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", v)
		}
		if size == 0 || n < size {
			size = n
		}
	}
	if t := p.Get("NextToken"); t != "" {
		n, ok := strings.CutPrefix(t, "fake-page-")
		at, err := strconv.Atoi(n)
		if !ok || err != nil || at < 0 || size == 0 {
			return 0, 0, badValue("Invalid value '%s' for nextToken", t)
		}
		start = at
	}
	return start, size, nil
}

// pageToken is the nextToken of a page starting at reservation n.
func pageToken(n int) string { return "fake-page-" + strconv.Itoa(n) }

func matches(i *Instance, fs []filter) bool {
	for _, f := range fs {
		var v string
		switch {
		case f.name == "instance-state-name":
			v = i.State
		case f.name == "client-token":
			v = i.ClientToken
		case f.name == "instance-id":
			v = i.ID
		default:
			v = i.Tag(strings.TrimPrefix(f.name, "tag:"))
			if v == "" && !slices.ContainsFunc(i.Tags, func(t tagXML) bool { return "tag:"+t.Key == f.name }) {
				return false
			}
		}
		if !slices.Contains(f.values, v) {
			return false
		}
	}
	return true
}

func (s *Server) terminateInstances(p url.Values) (any, *apiError) {
	ids, aerr := list(p, "InstanceId")
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) == 0 {
		return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter InstanceId"}
	}
	insts, aerr := s.lookupIDs(ids)
	if aerr != nil {
		return nil, aerr
	}
	resp := &terminateInstancesResponse{}
	for _, i := range insts {
		prev := i.State
		if i.State != "terminated" {
			i.State = "shutting-down"
		}
		resp.Instances = append(resp.Instances, stateChangeXML{InstanceID: i.ID,
			CurrentState: stateXML{Code: stateCodes[i.State], Name: i.State}, PreviousState: stateXML{Code: stateCodes[prev], Name: prev}})
	}
	return resp, nil
}

func (s *Server) consoleOutput(p url.Values) (any, *apiError) {
	id := p.Get("InstanceId")
	if id == "" {
		return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter InstanceId"}
	}
	insts, aerr := s.lookupIDs([]string{id})
	if aerr != nil {
		return nil, aerr
	}
	i := insts[0]
	resp := &consoleOutputResponse{InstanceID: i.ID, Timestamp: s.o.Now().UTC().Format(timeFormat)}
	if i.State != "running" {
		return resp, nil
	}
	i.consoleReads++
	if i.consoleReads <= s.o.ConsoleAfter {
		return resp, nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "[    0.000000] Linux version 6.1.0-18-cloud-amd64\r\n[    4.112233] cloud-init[512]: Cloud-init v. 22.4.2 running 'init'\r\n")
	fmt.Fprintf(&b, "<14>Mar  1 12:00:00 cloud-init: #############################################################\r\n")
	fmt.Fprintf(&b, "<14>Mar  1 12:00:00 cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----\r\n")
	for _, k := range i.HostKeys {
		if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err == nil {
			fmt.Fprintf(&b, "<14>Mar  1 12:00:00 cloud-init: 256 %s root@%s (%s)\r\n", ssh.FingerprintSHA256(pub), i.PrivateDNS, pub.Type())
		}
	}
	fmt.Fprintf(&b, "<14>Mar  1 12:00:00 cloud-init: -----END SSH HOST KEY FINGERPRINTS-----\r\n")
	fmt.Fprintf(&b, "-----BEGIN SSH HOST KEY KEYS-----\r\n")
	for _, k := range i.HostKeys {
		fmt.Fprintf(&b, "%s root@%s\r\n", k, i.PrivateDNS)
	}
	fmt.Fprintf(&b, "-----END SSH HOST KEY KEYS-----\r\n[   30.500000] cloud-init[777]: Cloud-init v. 22.4.2 finished\r\n")
	resp.Output = base64.StdEncoding.EncodeToString(b.Bytes())
	return resp, nil
}

var keyNameRe = regexp.MustCompile(`^[\x20-\x7e]{1,255}$`)

func (s *Server) importKeyPair(p url.Values) (any, *apiError) {
	name := p.Get("KeyName")
	if !keyNameRe.MatchString(name) {
		return nil, badValue("Key pair names are 1 to 255 ASCII characters, got %q", name)
	}
	if s.keyPairs[name] != nil {
		return nil, &apiError{status: 400, code: "InvalidKeyPair.Duplicate", msg: fmt.Sprintf("The keypair '%s' already exists.", name)}
	}
	raw, err := base64.StdEncoding.DecodeString(p.Get("PublicKeyMaterial"))
	if err != nil {
		return nil, &apiError{status: 400, code: "InvalidKey.Format", msg: "Key is not in valid OpenSSH public key format (PublicKeyMaterial is not base64)"}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(raw)
	if err != nil {
		return nil, &apiError{status: 400, code: "InvalidKey.Format", msg: "Key is not in valid OpenSSH public key format"}
	}
	kp := &keyPair{id: fmt.Sprintf("key-%017x", 0x0d000000000000000+uint64(len(s.keyPairs)+1)), name: name, created: s.o.Now().UTC(),
		public: strings.TrimSpace(string(raw))}
	switch pub.Type() {
	case ssh.KeyAlgoRSA:
		kp.typ, kp.fingerprint = "rsa", ssh.FingerprintLegacyMD5(pub)
	case ssh.KeyAlgoED25519:
		kp.typ = "ed25519"
		sum := sha256.Sum256(pub.Marshal())
		kp.fingerprint = base64.StdEncoding.EncodeToString(sum[:])
	default:
		return nil, &apiError{status: 400, code: "InvalidKey.Format", msg: "Key is not in valid OpenSSH public key format: only rsa and ed25519 keys are supported"}
	}
	specs, aerr := tagSpecs(p, "key-pair")
	if aerr != nil {
		return nil, aerr
	}
	if len(specs) > 0 {
		kp.tags = specs[0].tags
	}
	s.keyPairs[name] = kp
	return &importKeyPairResponse{KeyName: name, KeyFingerprint: kp.fingerprint, KeyPairID: kp.id, Tags: kp.tags}, nil
}

func (s *Server) describeKeyPairs(p url.Values) (any, *apiError) {
	names, aerr := list(p, "KeyName")
	if aerr != nil {
		return nil, aerr
	}
	withPub, aerr := boolean(p, "IncludePublicKey")
	if aerr != nil {
		return nil, aerr
	}
	if fs, aerr := filters(p); aerr != nil {
		return nil, aerr
	} else if len(fs) > 0 {
		return nil, badValue("this fake does not filter key pairs")
	}
	if len(names) == 0 {
		for n := range s.keyPairs {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	resp := &describeKeyPairsResponse{}
	for _, n := range names {
		kp := s.keyPairs[n]
		if kp == nil {
			return nil, &apiError{status: 400, code: "InvalidKeyPair.NotFound", msg: fmt.Sprintf("The key pair '%s' does not exist", n)}
		}
		x := keyPairXML{KeyPairID: kp.id, KeyName: kp.name, KeyFingerprint: kp.fingerprint, KeyType: kp.typ, Tags: kp.tags,
			CreateTime: kp.created.Format(timeFormat)}
		if withPub {
			x.PublicKey = kp.public
		}
		resp.Keys = append(resp.Keys, x)
	}
	return resp, nil
}

func (s *Server) deleteKeyPair(p url.Values) (any, *apiError) {
	name := p.Get("KeyName")
	if name == "" && p.Get("KeyPairId") == "" {
		return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter KeyName or KeyPairId"}
	}
	resp := &deleteKeyPairResponse{Return: true}
	if kp := s.keyPairs[name]; kp != nil {
		resp.KeyPairID = kp.id
		delete(s.keyPairs, name)
	}
	// EC2 answers true for a key pair that does not exist.
	return resp, nil
}

func (s *Server) describeImages(p url.Values) (any, *apiError) {
	ids, aerr := list(p, "ImageId")
	if aerr != nil {
		return nil, aerr
	}
	if fs, aerr := filters(p); aerr != nil {
		return nil, aerr
	} else if len(fs) > 0 {
		return nil, badValue("this fake does not filter images")
	}
	resp := &describeImagesResponse{}
	for _, id := range ids {
		if !amiRe.MatchString(id) {
			return nil, &apiError{status: 400, code: "InvalidAMIID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"ami-...\")", id)}
		}
		im, ok := s.images[id]
		if !ok {
			return nil, &apiError{status: 400, code: "InvalidAMIID.NotFound", msg: fmt.Sprintf("The image id '[%s]' does not exist", id)}
		}
		x := imageXML{ImageID: im.id, ImageLocation: "amazon/debian-12-amd64", ImageState: "available", ImageOwnerID: "136693071363",
			CreationDate: "2024-01-01T00:00:00.000Z", IsPublic: true, Architecture: "x86_64", ImageType: "machine",
			Name: "debian-12-amd64-20240101", RootDeviceType: im.rootType, RootDeviceName: im.rootDevice,
			VirtualizationType: "hvm", Hypervisor: "xen"}
		if im.rootType == "ebs" {
			x.BlockDevices = []imageBDMXML{{DeviceName: im.rootDevice, Ebs: &imageEbsXML{SnapshotID: "snap-0ff0ff0ff0ff0ff00",
				VolumeSize: im.size, DeleteOnTermination: true, VolumeType: "gp2"}}}
		} else {
			x.BlockDevices = []imageBDMXML{{DeviceName: "/dev/sdb", VirtualName: "ephemeral0"}}
		}
		resp.Images = append(resp.Images, x)
	}
	return resp, nil
}
