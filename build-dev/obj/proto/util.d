build-dev/obj/proto/util.o: proto/util.c proto/util.h
proto/util.h:
