// Package models mirrors the part of koding/db/models (db/models/machine.go
// at koding/koding 74c20cb0) that kloud's BaseMachine exposes: the
// jMachine document.
package models

import (
	"time"

	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
)

// Machine mirrors models.Machine, without the fields that need MongoDB's
// types (ObjectId, users, groups ...). Meta is a bson.M there: a
// map[string]interface{}.
type Machine struct {
	Uid         string                 `bson:"uid" json:"uid"`
	QueryString string                 `bson:"queryString,omitempty" json:"queryString"`
	IpAddress   string                 `bson:"ipAddress" json:"ipAddress"`
	RegisterURL string                 `bson:"registerUrl" json:"registerUrl"`
	Domain      string                 `bson:"domain" json:"domain"`
	Provider    string                 `bson:"provider" json:"provider"`
	Label       string                 `bson:"label" json:"label"`
	Slug        string                 `bson:"slug" json:"slug"`
	Credential  string                 `bson:"credential" json:"credential"`
	CreatedAt   time.Time              `bson:"createdAt" json:"createdAt"`
	Status      MachineStatus          `bson:"status" json:"status"`
	Meta        map[string]interface{} `bson:"meta" json:"meta"`
}

// MachineStatus mirrors models.MachineStatus.
type MachineStatus struct {
	State      string    `bson:"state" json:"state"`
	Reason     string    `bson:"reason" json:"reason"`
	ModifiedAt time.Time `bson:"modifiedAt" json:"modifiedAt"`
}

// State returns the machine's state.
func (m *Machine) State() machinestate.State { return machinestate.States[m.Status.State] }

// User mirrors models.User's name (BaseMachine.User).
type User struct {
	Name string `bson:"username" json:"username"`
}
