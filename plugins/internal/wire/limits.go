package wire

// MaxBatchBytes bounds the encoded calls, or replies, gathered into one
// message of the Calls stream, far below gRPC's default 4 MiB limit on a
// received message. A single call or reply bigger than that still travels,
// alone in its message.
const MaxBatchBytes = 1 << 20

// MaxCallBytes is the largest request the agent sends: the plugin's gRPC
// server refuses a received message over 4 MiB, and a call's CallBatch
// adds a few bytes of framing to its request.
const MaxCallBytes = 4<<20 - 1<<10
