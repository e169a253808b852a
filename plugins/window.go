package plugins

import "google.golang.org/grpc"

// flowWindow is the HTTP/2 flow-control window, per stream and per
// connection, that each side of the plugin connection grants the other,
// fixed (DESIGN.md#plugin-window). gRPC's default window starts at 64 KiB
// and grows by measuring the link: after every acknowledged measurement,
// the next data frame received sends a PING, which the peer answers. On
// the Calls stream, where every message is a few hundred bytes and the
// window never needs to grow, that is a PING and its answer, two more
// frames written and read, on nearly every round trip between agent and
// plugin. A fixed window turns the measurement off. 4 MiB holds the
// largest message either side sends (maxCallBytes, gRPC's 4 MiB limit on
// a received message), so no message waits for a window update.
const flowWindow = 4 << 20

// staticWindowDialOptions are the agent's side of flowWindow.
var staticWindowDialOptions = []grpc.DialOption{
	grpc.WithInitialWindowSize(flowWindow),
	grpc.WithInitialConnWindowSize(flowWindow),
}

// staticWindowServerOptions are the plugin's side of flowWindow.
var staticWindowServerOptions = []grpc.ServerOption{
	grpc.InitialWindowSize(flowWindow),
	grpc.InitialConnWindowSize(flowWindow),
}
