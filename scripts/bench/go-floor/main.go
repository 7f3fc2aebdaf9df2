// The floor of an ext_proc hop: a Go (grpc-go) ext_proc server that answers every message with
// an empty CONTINUE reply and does nothing else. Not part of llm-extproc; `npm run bench --
// --external-extproc ADDRESS` measures it on the same Envoy config as llm-extproc (see
// docs/benchmarks.md, "Where the per-chunk tail comes from, chunk by chunk").
package main

import (
	"flag"
	"io"
	"log"
	"net"

	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type server struct {
	extproc.UnimplementedExternalProcessorServer
}

func (server) Process(stream extproc.ExternalProcessor_ProcessServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &extproc.ProcessingResponse{}
		switch req.Request.(type) {
		case *extproc.ProcessingRequest_RequestHeaders:
			resp.Response = &extproc.ProcessingResponse_RequestHeaders{RequestHeaders: &extproc.HeadersResponse{}}
		case *extproc.ProcessingRequest_RequestBody:
			resp.Response = &extproc.ProcessingResponse_RequestBody{RequestBody: &extproc.BodyResponse{}}
		case *extproc.ProcessingRequest_ResponseHeaders:
			resp.Response = &extproc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extproc.HeadersResponse{}}
		case *extproc.ProcessingRequest_ResponseBody:
			resp.Response = &extproc.ProcessingResponse_ResponseBody{ResponseBody: &extproc.BodyResponse{}}
		case *extproc.ProcessingRequest_RequestTrailers:
			resp.Response = &extproc.ProcessingResponse_RequestTrailers{RequestTrailers: &extproc.TrailersResponse{}}
		case *extproc.ProcessingRequest_ResponseTrailers:
			resp.Response = &extproc.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extproc.TrailersResponse{}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	extproc.RegisterExternalProcessorServer(s, server{})
	h := health.NewServer()
	h.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, h)
	log.Printf("listening %s", lis.Addr())
	log.Fatal(s.Serve(lis))
}
