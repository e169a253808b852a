package plugins

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// ChildConfigEnv is the environment variable through which the agent hands
// a store plugin its store configuration, as the JSON of a ChildConfig.
const ChildConfigEnv = "LEASEKEEPER_STORE_CONFIG"

// parentPIDEnv carries the agent's pid to the plugin, so the plugin can
// tell whether the agent died before the plugin armed its parent-death
// signal (see bindToParent).
const parentPIDEnv = "LEASEKEEPER_STORE_PLUGIN_PARENT"

// ChildConfig is the store configuration a plugin process receives from the
// agent: everything it needs to open the backend the agent was configured
// with. The plugin cannot see the agent's config file; this is its only
// input.
type ChildConfig struct {
	// Backend is "bolt", "mongo", or the path of an external plugin binary.
	Backend string `json:"backend"`
	// Path is the bbolt file (store.path).
	Path string `json:"path,omitempty"`
	// URI and Database locate MongoDB (store.uri, store.database).
	URI      string `json:"uri,omitempty"`
	Database string `json:"database,omitempty"`
	// Board is the board the store is opened with.
	Board board.Board `json:"board"`
	// Lease is the claim lease.
	Lease time.Duration `json:"-"`
	// UnleasedHorizon is the age past which the fleet twin lists un-leased
	// claims (DESIGN.md#unleased-sweep).
	UnleasedHorizon time.Duration `json:"-"`
}

// MarshalJSON spells the durations in Go syntax ("30s"), so a plugin
// author reading the variable sees what the config file said.
func (c ChildConfig) MarshalJSON() ([]byte, error) {
	type plain ChildConfig // drops the methods, so no recursion
	j := struct {
		plain
		Lease           string `json:"lease,omitempty"`
		UnleasedHorizon string `json:"unleased_horizon,omitempty"`
	}{plain: plain(c)}
	if c.Lease != 0 {
		j.Lease = c.Lease.String()
	}
	if c.UnleasedHorizon != 0 {
		j.UnleasedHorizon = c.UnleasedHorizon.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads durations in Go syntax.
func (c *ChildConfig) UnmarshalJSON(b []byte) error {
	type plain ChildConfig
	var j struct {
		plain
		Lease           string `json:"lease,omitempty"`
		UnleasedHorizon string `json:"unleased_horizon,omitempty"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = ChildConfig(j.plain)
	var err error
	if j.Lease != "" {
		if c.Lease, err = time.ParseDuration(j.Lease); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
	}
	if j.UnleasedHorizon != "" {
		if c.UnleasedHorizon, err = time.ParseDuration(j.UnleasedHorizon); err != nil {
			return fmt.Errorf("unleased_horizon: %w", err)
		}
	}
	return nil
}

// Environ returns the "NAME=value" entry that hands c to a plugin process.
func (c ChildConfig) Environ() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("store plugin config: %w", err)
	}
	return ChildConfigEnv + "=" + string(b), nil
}

// ChildConfigFromEnv reads the configuration the agent passed to this
// plugin process. A missing variable is an error naming it: a store plugin
// is started by the agent, never by hand.
func ChildConfigFromEnv() (ChildConfig, error) {
	v, ok := os.LookupEnv(ChildConfigEnv)
	if !ok {
		return ChildConfig{}, fmt.Errorf("store plugin config: %s is not set (the agent sets it when it starts the plugin)", ChildConfigEnv)
	}
	var c ChildConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return ChildConfig{}, fmt.Errorf("store plugin config: %s: %w", ChildConfigEnv, err)
	}
	return c, nil
}
