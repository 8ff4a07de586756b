build-dev/obj/proto/proto.o: proto/proto.c proto/proto.h
proto/proto.h:
