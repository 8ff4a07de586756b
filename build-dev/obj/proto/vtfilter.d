build-dev/obj/proto/vtfilter.o: proto/vtfilter.c proto/vtfilter.h \
 proto/util.h proto/vtparse.h
proto/vtfilter.h:
proto/util.h:
proto/vtparse.h:
