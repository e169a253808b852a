package serve

import (
	"github.com/leasekeeper/leasekeeper/storespec"
)

// ChildConfigEnv is the environment variable through which the agent hands
// a store plugin its store configuration, as the JSON of a ChildConfig.
const ChildConfigEnv = storespec.Env

// ChildConfig is the store configuration a plugin process receives from the
// agent: everything it needs to open the backend the agent was configured
// with. The plugin cannot see the agent's config file; this is its only
// input. It is the agent's store spec itself (storespec.Spec), named here
// for plugin authors.
type ChildConfig = storespec.Spec

// ChildConfigFromEnv reads the configuration the agent passed to this
// plugin process (storespec.FromEnv). A missing variable is an error
// naming it: a store plugin is started by the agent, never by hand.
func ChildConfigFromEnv() (ChildConfig, error) { return storespec.FromEnv() }
