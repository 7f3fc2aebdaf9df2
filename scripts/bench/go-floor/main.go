// The floor of an ext_proc hop: a Go (grpc-go) ext_proc server that answers every message with
// an empty CONTINUE reply and does nothing else. Under FULL_DUPLEX_STREAMED, where Envoy rejects a
// plain body reply, it hands every body chunk straight back as a streamed_response (the least a
// full-duplex server can do). Not part of llm-extproc; `npm run bench --
// --external-extproc ADDRESS` measures it on the same Envoy config as llm-extproc (see
// docs/benchmarks.md, "Where the per-chunk tail comes from, chunk by chunk").
package main

import (
	"flag"
	"io"
	"log"
	"net"

	filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type server struct {
	extproc.UnimplementedExternalProcessorServer
}

// echo hands a body chunk back unchanged, as full duplex requires.
func echo(body *extproc.HttpBody) *extproc.BodyResponse {
	return &extproc.BodyResponse{Response: &extproc.CommonResponse{BodyMutation: &extproc.BodyMutation{
		Mutation: &extproc.BodyMutation_StreamedResponse{StreamedResponse: &extproc.StreamedBodyResponse{
			Body: body.GetBody(), EndOfStream: body.GetEndOfStream(),
		}},
	}}}
}

func (server) Process(stream extproc.ExternalProcessor_ProcessServer) error {
	var duplexRequest, duplexResponse bool
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if pc := req.GetProtocolConfig(); pc != nil {
			duplexRequest = pc.GetRequestBodyMode() == filter.ProcessingMode_FULL_DUPLEX_STREAMED
			duplexResponse = pc.GetResponseBodyMode() == filter.ProcessingMode_FULL_DUPLEX_STREAMED
		}
		resp := &extproc.ProcessingResponse{}
		switch r := req.Request.(type) {
		case *extproc.ProcessingRequest_RequestHeaders:
			resp.Response = &extproc.ProcessingResponse_RequestHeaders{RequestHeaders: &extproc.HeadersResponse{}}
		case *extproc.ProcessingRequest_RequestBody:
			if duplexRequest {
				resp.Response = &extproc.ProcessingResponse_RequestBody{RequestBody: echo(r.RequestBody)}
			} else {
				resp.Response = &extproc.ProcessingResponse_RequestBody{RequestBody: &extproc.BodyResponse{}}
			}
		case *extproc.ProcessingRequest_ResponseHeaders:
			resp.Response = &extproc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extproc.HeadersResponse{}}
		case *extproc.ProcessingRequest_ResponseBody:
			if duplexResponse {
				resp.Response = &extproc.ProcessingResponse_ResponseBody{ResponseBody: echo(r.ResponseBody)}
			} else {
				resp.Response = &extproc.ProcessingResponse_ResponseBody{ResponseBody: &extproc.BodyResponse{}}
			}
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
