package wire

import "google.golang.org/grpc"

// FlowWindow is the HTTP/2 flow-control window, per stream and per
// connection, that each side of the plugin connection grants the other,
// fixed (DESIGN.md#plugin-window). gRPC's default window starts at 64 KiB
// and grows by measuring the link: after every acknowledged measurement,
// the next data frame received sends a PING, which the peer answers. On
// the Calls stream, where every message is a few hundred bytes and the
// window never needs to grow, that is a PING and its answer, two more
// frames written and read, on nearly every round trip between agent and
// plugin. A fixed window turns the measurement off. 4 MiB holds the
// largest message either side sends (MaxCallBytes, gRPC's 4 MiB limit on
// a received message), so no message waits for a window update.
const FlowWindow = 4 << 20

// StaticWindowDialOptions are the agent's side of FlowWindow.
var StaticWindowDialOptions = []grpc.DialOption{
	grpc.WithInitialWindowSize(FlowWindow),
	grpc.WithInitialConnWindowSize(FlowWindow),
}

// StaticWindowServerOptions are the plugin's side of FlowWindow.
var StaticWindowServerOptions = []grpc.ServerOption{
	grpc.InitialWindowSize(FlowWindow),
	grpc.InitialConnWindowSize(FlowWindow),
}
