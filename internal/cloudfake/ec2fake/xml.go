package ec2fake

import "encoding/xml"

// The EC2 Query API's answers, as its API reference documents them (API
// version 2016-11-15), for the actions the fake serves. Only the
// elements a client reads are filled; the others are left out, as EC2
// itself leaves out what does not apply.

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

// timeFormat is EC2's timestamp format (ISO 8601, milliseconds, UTC).
const timeFormat = "2006-01-02T15:04:05.000Z"

type errorResponse struct {
	XMLName   xml.Name   `xml:"Response"`
	Errors    []errorXML `xml:"Errors>Error"`
	RequestID string     `xml:"RequestID"`
}

type errorXML struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type tagXML struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type groupXML struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type placementXML struct {
	AvailabilityZone string `xml:"availabilityZone"`
	GroupName        string `xml:"groupName"`
	Tenancy          string `xml:"tenancy"`
}

type ebsXML struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type instanceBDMXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        ebsXML `xml:"ebs"`
}

type reasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type profileXML struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type monitoringXML struct {
	State string `xml:"state"`
}

type instanceXML struct {
	InstanceID         string           `xml:"instanceId"`
	ImageID            string           `xml:"imageId"`
	State              stateXML         `xml:"instanceState"`
	PrivateDNSName     string           `xml:"privateDnsName"`
	DNSName            string           `xml:"dnsName"`
	Reason             string           `xml:"reason"`
	KeyName            string           `xml:"keyName,omitempty"`
	AmiLaunchIndex     int              `xml:"amiLaunchIndex"`
	InstanceType       string           `xml:"instanceType"`
	LaunchTime         string           `xml:"launchTime"`
	Placement          placementXML     `xml:"placement"`
	Monitoring         monitoringXML    `xml:"monitoring"`
	SubnetID           string           `xml:"subnetId,omitempty"`
	VpcID              string           `xml:"vpcId,omitempty"`
	PrivateIP          string           `xml:"privateIpAddress,omitempty"`
	PublicIP           string           `xml:"ipAddress,omitempty"`
	SourceDestCheck    bool             `xml:"sourceDestCheck"`
	Groups             []groupXML       `xml:"groupSet>item"`
	StateReason        *reasonXML       `xml:"stateReason,omitempty"`
	Architecture       string           `xml:"architecture"`
	RootDeviceType     string           `xml:"rootDeviceType"`
	RootDeviceName     string           `xml:"rootDeviceName"`
	BlockDevices       []instanceBDMXML `xml:"blockDeviceMapping>item"`
	VirtualizationType string           `xml:"virtualizationType"`
	ClientToken        string           `xml:"clientToken"`
	Tags               []tagXML         `xml:"tagSet>item,omitempty"`
	Hypervisor         string           `xml:"hypervisor"`
	IamInstanceProfile *profileXML      `xml:"iamInstanceProfile,omitempty"`
	EbsOptimized       bool             `xml:"ebsOptimized"`
}

type runInstancesResponse struct {
	XMLName       xml.Name      `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ RunInstancesResponse"`
	RequestID     string        `xml:"requestId"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []groupXML    `xml:"groupSet>item"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

type reservationXML struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []groupXML    `xml:"groupSet>item"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstancesResponse"`
	RequestID    string           `xml:"requestId"`
	Reservations []reservationXML `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type stateChangeXML struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  stateXML `xml:"currentState"`
	PreviousState stateXML `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ TerminateInstancesResponse"`
	RequestID string           `xml:"requestId"`
	Instances []stateChangeXML `xml:"instancesSet>item"`
}

type consoleOutputResponse struct {
	XMLName    xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ GetConsoleOutputResponse"`
	RequestID  string   `xml:"requestId"`
	InstanceID string   `xml:"instanceId"`
	Timestamp  string   `xml:"timestamp"`
	Output     string   `xml:"output"`
}

type importKeyPairResponse struct {
	XMLName        xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ ImportKeyPairResponse"`
	RequestID      string   `xml:"requestId"`
	KeyName        string   `xml:"keyName"`
	KeyFingerprint string   `xml:"keyFingerprint"`
	KeyPairID      string   `xml:"keyPairId"`
	Tags           []tagXML `xml:"tagSet>item,omitempty"`
}

type keyPairXML struct {
	KeyPairID      string   `xml:"keyPairId"`
	KeyName        string   `xml:"keyName"`
	KeyFingerprint string   `xml:"keyFingerprint"`
	KeyType        string   `xml:"keyType"`
	PublicKey      string   `xml:"publicKey,omitempty"`
	Tags           []tagXML `xml:"tagSet>item,omitempty"`
	CreateTime     string   `xml:"createTime"`
}

type describeKeyPairsResponse struct {
	XMLName   xml.Name     `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeKeyPairsResponse"`
	RequestID string       `xml:"requestId"`
	Keys      []keyPairXML `xml:"keySet>item"`
}

type deleteKeyPairResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DeleteKeyPairResponse"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
	KeyPairID string   `xml:"keyPairId,omitempty"`
}

type imageEbsXML struct {
	SnapshotID          string `xml:"snapshotId"`
	VolumeSize          int    `xml:"volumeSize"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
	VolumeType          string `xml:"volumeType"`
	Encrypted           bool   `xml:"encrypted"`
}

type imageBDMXML struct {
	DeviceName  string       `xml:"deviceName"`
	VirtualName string       `xml:"virtualName,omitempty"`
	Ebs         *imageEbsXML `xml:"ebs,omitempty"`
}

type imageXML struct {
	ImageID            string        `xml:"imageId"`
	ImageLocation      string        `xml:"imageLocation"`
	ImageState         string        `xml:"imageState"`
	ImageOwnerID       string        `xml:"imageOwnerId"`
	CreationDate       string        `xml:"creationDate"`
	IsPublic           bool          `xml:"isPublic"`
	Architecture       string        `xml:"architecture"`
	ImageType          string        `xml:"imageType"`
	Name               string        `xml:"name"`
	RootDeviceType     string        `xml:"rootDeviceType"`
	RootDeviceName     string        `xml:"rootDeviceName"`
	BlockDevices       []imageBDMXML `xml:"blockDeviceMapping>item"`
	VirtualizationType string        `xml:"virtualizationType"`
	Hypervisor         string        `xml:"hypervisor"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeImagesResponse"`
	RequestID string     `xml:"requestId"`
	Images    []imageXML `xml:"imagesSet>item"`
}
