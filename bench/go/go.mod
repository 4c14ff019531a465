module github.com/liftbridge-python/liftbridge-bench-go

go 1.21

require github.com/liftbridge-io/go-liftbridge/v2 v2.3.0

require (
	github.com/golang/protobuf v1.5.2 // indirect
	github.com/liftbridge-io/liftbridge-api v1.8.0 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/serialx/hashring v0.0.0-20200727003509-22c0c7ab6b1b // indirect
	golang.org/x/net v0.0.0-20220225172249-27dd8689420f // indirect
	golang.org/x/sys v0.0.0-20220310020820-b874c991c1a5 // indirect
	golang.org/x/text v0.3.7 // indirect
	google.golang.org/genproto v0.0.0-20220310185008-1973136f34c6 // indirect
	google.golang.org/grpc v1.45.0 // indirect
	google.golang.org/protobuf v1.27.1 // indirect
)
